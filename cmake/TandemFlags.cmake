# Compiler flags shared by every target, and the sanitizer flag set used by the `Asan` build
# type and by the sanitizer twins of the unit tests (see TandemTesting.cmake).
add_compile_definitions(_GNU_SOURCE)
set(c_warnings -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter -fno-strict-aliasing)
if(TANDEM_WERROR)
    list(APPEND c_warnings -Werror)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C>:${c_warnings}>")

set(TANDEM_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)

# CMAKE_BUILD_TYPE=Asan builds everything with ASan+UBSan.
set(CMAKE_C_FLAGS_ASAN "-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    CACHE STRING "" FORCE)
set(CMAKE_EXE_LINKER_FLAGS_ASAN "-fsanitize=address,undefined" CACHE STRING "" FORCE)
set(CMAKE_SHARED_LINKER_FLAGS_ASAN "-fsanitize=address,undefined" CACHE STRING "" FORCE)
if(CMAKE_BUILD_TYPE STREQUAL "Asan")
    set(TANDEM_UNIT_ASAN OFF CACHE BOOL "" FORCE) # everything is already sanitized
endif()

set(TANDEM_SANITIZER_ENV
    "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/scripts/lsan.supp")
if(TANDEM_LIBFUZZER)
    set(TANDEM_UNIT_ASAN OFF CACHE BOOL "" FORCE) # the fuzz build instruments everything itself
    add_compile_options("$<$<COMPILE_LANGUAGE:C>:-fsanitize=fuzzer-no-link,address,undefined>")
    add_link_options(-fsanitize=address,undefined)
endif()
