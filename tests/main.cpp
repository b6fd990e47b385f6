// The one Catch2 main for every test file in tests/.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
