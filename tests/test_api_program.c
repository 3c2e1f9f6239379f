/* test_api_program: runs tests/api_program.c (a program that knows only
 * coil.h) inside the test suite: 100 MiB written, reopened, read back. */
#include <criterion/criterion.h>
#include <sys/stat.h>

#define main api_program_main
#include "api_program.c"
#undef main

Test(api_program, hundred_mib_roundtrip, .timeout = 240)
{
	char *argv[] = { "api_program", "engine-stores/api_program.coil", NULL };

	mkdir("engine-stores", 0755);
	cr_assert_eq(api_program_main(2, argv), 0);
}
