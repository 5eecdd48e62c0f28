#include "lib/uuid.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

void tandem_uuid4(char out[TANDEM_UUID_LEN + 1])
{
    uint8_t b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
        for (size_t i = 0; i < sizeof b; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            b[i] = (uint8_t)(x >> 56);
        }
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, TANDEM_UUID_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}
