# Helpers that register tests with ctest, so that `make test` prints one summary.
#
#   tandem_add_library(NAME SOURCES... LINK libs...)
#       a static library and, when TANDEM_UNIT_ASAN is on, its sanitized twin NAME_asan.
#   tandem_add_unit_tests(DIR dir PREFIX p LINK lib)
#       every DIR/test_*.c becomes a cmocka executable registered as unit/p/<name>, plus its
#       sanitized twin registered as asan/p/<name> (linked against lib_asan).
#   tandem_add_fuzz_targets(DIR dir PREFIX p LINK lib)
#       every DIR/fuzz_*.c (an LLVMFuzzerTestOneInput) is linked with the standalone driver and
#       registered as fuzz/p/<name>: it replays DIR/corpus/<name>/ and a bounded number of
#       seeded mutations, under ASan+UBSan when available. With GENERATED_CORPUS gen FIXTURE fx,
#       a target without a DIR/corpus/<name>/ replays gen/<name>/ instead, written by the ctest
#       fixture fx (seeds that are model files are generated, not kept in the repository);
#       GENERATOR exe names the program that writes them (for e2e/fuzz/campaign.sh).

function(tandem_add_library name)
    cmake_parse_arguments(A "" "" "SOURCES;LINK;INCLUDE" ${ARGN})
    add_library(${name} STATIC ${A_SOURCES})
    target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR} ${A_INCLUDE})
    target_link_libraries(${name} PUBLIC ${A_LINK})
    if(TANDEM_UNIT_ASAN)
        add_library(${name}_asan STATIC ${A_SOURCES})
        target_include_directories(${name}_asan PUBLIC ${CMAKE_SOURCE_DIR} ${A_INCLUDE})
        set(asan_link)
        foreach(l ${A_LINK})
            if(TARGET ${l}_asan)
                list(APPEND asan_link ${l}_asan)
            else()
                list(APPEND asan_link ${l})
            endif()
        endforeach()
        target_link_libraries(${name}_asan PUBLIC ${asan_link})
        target_compile_options(${name}_asan PRIVATE -O1 -g ${TANDEM_SANITIZE_FLAGS})
        target_link_options(${name}_asan PUBLIC ${TANDEM_SANITIZE_FLAGS})
    endif()
endfunction()

function(tandem_add_unit_tests)
    cmake_parse_arguments(A "" "DIR;PREFIX" "LINK" ${ARGN})
    file(GLOB tests CONFIGURE_DEPENDS ${A_DIR}/test_*.c)
    foreach(src ${tests})
        get_filename_component(name ${src} NAME_WE)
        set(exe ${A_PREFIX}_${name})
        add_executable(${exe} ${src})
        target_link_libraries(${exe} PRIVATE ${A_LINK} PkgConfig::CMOCKA)
        add_test(NAME unit/${A_PREFIX}/${name} COMMAND ${exe} WORKING_DIRECTORY ${A_DIR})
        set_tests_properties(unit/${A_PREFIX}/${name} PROPERTIES LABELS unit TIMEOUT 300
                             ENVIRONMENT "${TANDEM_SANITIZER_ENV}")
        if(TANDEM_UNIT_ASAN)
            set(asan_link)
            foreach(l ${A_LINK})
                if(TARGET ${l}_asan)
                    list(APPEND asan_link ${l}_asan)
                else()
                    list(APPEND asan_link ${l})
                endif()
            endforeach()
            add_executable(${exe}_asan ${src})
            target_compile_options(${exe}_asan PRIVATE -O1 -g ${TANDEM_SANITIZE_FLAGS})
            target_link_options(${exe}_asan PRIVATE ${TANDEM_SANITIZE_FLAGS})
            target_link_libraries(${exe}_asan PRIVATE ${asan_link} PkgConfig::CMOCKA)
            add_test(NAME asan/${A_PREFIX}/${name} COMMAND ${exe}_asan WORKING_DIRECTORY ${A_DIR})
            set_tests_properties(asan/${A_PREFIX}/${name} PROPERTIES LABELS "unit;asan" TIMEOUT 600
                                 ENVIRONMENT "${TANDEM_SANITIZER_ENV}")
        endif()
    endforeach()
endfunction()

# Memory and time limits of every fuzz run in `make test` (libFuzzer's flag names; the campaign
# of e2e/fuzz/campaign.sh passes the same to libFuzzer).
set(TANDEM_FUZZ_LIMITS -malloc_limit_mb=256 -rss_limit_mb=1024 -timeout=60)

# fuzz-targets.tsv: one line per fuzz target (executable, seed corpus in the tree, generated seed
# directory, its generator), read by e2e/fuzz/campaign.sh.
file(WRITE ${CMAKE_BINARY_DIR}/fuzz-targets.tsv "")

function(tandem_add_fuzz_targets)
    cmake_parse_arguments(A "" "DIR;PREFIX;ITERATIONS;GENERATED_CORPUS;FIXTURE;GENERATOR" "LINK"
                          ${ARGN})
    if(NOT A_ITERATIONS)
        set(A_ITERATIONS 20000)
    endif()
    file(GLOB targets CONFIGURE_DEPENDS ${A_DIR}/fuzz_*.c)
    foreach(src ${targets})
        get_filename_component(name ${src} NAME_WE)
        set(exe ${A_PREFIX}_${name})
        set(gen_dir "")
        if(A_GENERATED_CORPUS)
            set(gen_dir ${A_GENERATED_CORPUS}/${name})
        endif()
        file(APPEND ${CMAKE_BINARY_DIR}/fuzz-targets.tsv
             "${exe}\t${CMAKE_CURRENT_BINARY_DIR}/${exe}\t${A_DIR}/corpus/${name}\t${gen_dir}\t${A_GENERATOR}\n")
        set(link ${A_LINK})
        set(flags)
        if(TANDEM_UNIT_ASAN)
            set(link)
            foreach(l ${A_LINK})
                if(TARGET ${l}_asan)
                    list(APPEND link ${l}_asan)
                else()
                    list(APPEND link ${l})
                endif()
            endforeach()
            set(flags -O1 -g ${TANDEM_SANITIZE_FLAGS})
        endif()
        if(TANDEM_LIBFUZZER)
            # clang with libFuzzer: a real coverage-guided fuzzer, run by hand (`make fuzz`).
            add_executable(${exe} ${src} ${CMAKE_SOURCE_DIR}/e2e/fuzz/fuzz_heap.c)
            target_compile_options(${exe} PRIVATE -g -fsanitize=fuzzer,address,undefined)
            target_link_options(${exe} PRIVATE -fsanitize=fuzzer,address,undefined)
            target_link_libraries(${exe} PRIVATE ${A_LINK})
            continue()
        endif()
        add_executable(${exe} ${src} ${CMAKE_SOURCE_DIR}/e2e/fuzz/standalone_driver.c
                              ${CMAKE_SOURCE_DIR}/e2e/fuzz/fuzz_heap.c)
        target_compile_options(${exe} PRIVATE ${flags})
        target_link_options(${exe} PRIVATE ${flags})
        target_link_libraries(${exe} PRIVATE ${link})
        set(corpus ${A_DIR}/corpus/${name})
        if(A_GENERATED_CORPUS AND NOT EXISTS ${corpus})
            set(corpus ${A_GENERATED_CORPUS}/${name})
        endif()
        # The limits fail a parser that balloons or spins (e2e/fuzz/standalone_driver.c).
        add_test(NAME fuzz/${A_PREFIX}/${name}
                 COMMAND ${exe} -runs=${A_ITERATIONS} ${TANDEM_FUZZ_LIMITS} ${corpus})
        set_tests_properties(fuzz/${A_PREFIX}/${name} PROPERTIES LABELS fuzz TIMEOUT 600
                             ENVIRONMENT "${TANDEM_SANITIZER_ENV}")
        if(A_GENERATED_CORPUS AND NOT EXISTS ${A_DIR}/corpus/${name})
            set_tests_properties(fuzz/${A_PREFIX}/${name} PROPERTIES FIXTURES_REQUIRED ${A_FIXTURE})
        endif()
    endforeach()
endfunction()
