/* test_engine_basic: create, write, read, close, reopen, recover. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"

Test(engine_basic, create_write_read_reopen)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *buf = malloc(300000), *rd = malloc(300000);

	et_path(path, sizeof(path), "basic");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	et_fill(buf, 300000, 1, 1);
	cr_assert_eq(coil_pwrite(h, buf, 300000, 1000), 300000);
	memset(rd, 0xee, 300000);
	cr_assert_eq(coil_pread(h, rd, 300000, 1000), 300000);
	cr_assert(memcmp(rd, buf, 300000) == 0);
	cr_assert_eq(coil_pread(h, rd, 2000, 0), 2000);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(rd[i], 0);
	cr_assert(memcmp(rd + 1000, buf, 1000) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);

	o.flags &= ~COIL_CREATE;
	int rc = coil_open(path, &o, &s);
	cr_assert_eq(rc, 0, "reopen: %s", coil_strerror(rc));
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	uint64_t size;
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 301000);
	memset(rd, 0, 300000);
	cr_assert_eq(coil_pread(h, rd, 300000, 1000), 300000);
	cr_assert(memcmp(rd, buf, 300000) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
	free(rd);
}
