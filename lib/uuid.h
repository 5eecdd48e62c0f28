/* Random (version 4) UUIDs, for request and engine ids. */
#ifndef TANDEM_LIB_UUID_H
#define TANDEM_LIB_UUID_H

#define TANDEM_UUID_LEN 36 /* characters, without the NUL */

/* Writes a version-4 UUID ("8-4-4-4-12" lower-case hex) and a NUL into out. getrandom(2)
 * supplies the bits; without entropy (early boot) a clock-seeded generator does. */
void tandem_uuid4(char out[TANDEM_UUID_LEN + 1]);

#endif
