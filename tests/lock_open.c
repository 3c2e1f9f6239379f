/* lock_open PATH [ro]: open the store at PATH from a process of its own (a
 * forked child would inherit the parent's registry of open stores) and
 * exit with the negated return code of coil_open.  test_engine_lock. */
#include <string.h>

#include "coil.h"

int main(int argc, char **argv)
{
	struct coil_options o;
	coil_store *s;
	int rc;

	if (argc < 2)
		return 255;
	coil_options_init(&o);
	if (argc > 2 && strcmp(argv[2], "ro") == 0)
		o.flags |= COIL_RDONLY;
	if (argc > 3 && strcmp(argv[3], "nodirect") == 0)
		o.flags |= COIL_NO_DIRECT;
	o.workers = 1;
	rc = coil_open(argv[1], &o, &s);
	if (rc == 0)
		rc = coil_close(s);
	return -rc & 0xff;
}
