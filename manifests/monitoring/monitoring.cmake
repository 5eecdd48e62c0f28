# Tests of manifests/monitoring/ (Prometheus rules, monitors, Grafana dashboards), included from
# the top-level CMakeLists.txt. tests/check.sh needs promtool (Debian: prometheus) and
# /usr/bin/python3 with PyYAML; without them it skips (77).
add_test(NAME unit/monitoring/check
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tests/check.sh)
set_tests_properties(unit/monitoring/check PROPERTIES LABELS "unit;monitoring" TIMEOUT 300
                     SKIP_RETURN_CODE 77)
