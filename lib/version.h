/* The one version of every Tandem binary. CMake passes TANDEM_VERSION from project(VERSION) in
 * the top-level CMakeLists.txt; the fallback only serves tools that read a header alone. */
#ifndef TANDEM_LIB_VERSION_H
#define TANDEM_LIB_VERSION_H

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "0.0.0-unknown"
#endif

#endif
