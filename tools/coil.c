/* coil — the command-line tool for a coil store (uses only coil.h).
 *
 * This file: the command table, help, --version and `create`.  The other
 * commands live in cli_objects.c (ls, rm, mv, cp, compact, check), cli_copy.c
 * (put, get), cli_tree.c (import, export) and cli_stats.c (stats).  docs/cli.md is the manual; keep the
 * help texts below and it saying the same. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/cli.h"

#ifndef COIL_VERSION
#define COIL_VERSION "unknown"
#endif

struct cmd {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *summary;
	const char *help; /* the rest of `coil help CMD` */
};

static const char size_help[] =
	"SIZE is a whole number of bytes with an optional suffix K, M, G or T\n"
	"(powers of 1024, either case; KiB, MB and the like too): 64M, 2G, 1536M.\n";

static const struct cmd cmds[] = {
	{ "create", cmd_create,
	  "coil create [-c CODEC] STORE SIZE [CODEC]",
	  "make a new store that may grow to SIZE bytes",
	  "Make a new store in the file STORE (which must not exist) that may\n"
	  "grow to SIZE bytes (0: as large as the file system).  The file starts\n"
	  "at most 64 MiB on disk and grows as data arrives.  The smallest SIZE\n"
	  "is 6 MiB.\n"
	  "\n"
	  "  -c, --compression CODEC   checked and accepted for compatibility\n"
	  "                            (also as the third argument), but a store\n"
	  "                            does not record a codec: each write uses\n"
	  "                            the codec of the open that makes it (see\n"
	  "                            'coil put -c')\n"
	  "\n"
	  "If the store cannot be made, no file is left behind.\n" },
	{ "ls", cmd_ls,
	  "coil ls [-l] STORE",
	  "list the objects, sorted by name",
	  "Print the name of every object, one a line, sorted by name (bytes).\n"
	  "\n"
	  "  -l, --long   also the logical size of each object in bytes (what a\n"
	  "               get would produce; holes count).  The library does not\n"
	  "               report stored (compressed) bytes per object: see\n"
	  "               'coil stats' for the store's total.\n" },
	{ "stats", cmd_stats,
	  "coil stats [--json [--pretty]] STORE",
	  "show space, compression, cache, pool and prefetch figures",
	  "Show the store's space (logical, stored, allocated, free), its\n"
	  "compression ratio and geometry, then the counters of this process's\n"
	  "open of the store (cache, pool, prefetch: zero for a fresh open).\n"
	  "\n"
	  "  --json     print the library's JSON instead (one line)\n"
	  "  --pretty   with --json: indented, one field a line\n" },
	{ "put", cmd_put,
	  "coil put [-f] [-c CODEC] STORE NAME FILE",
	  "copy FILE (- for stdin) into the object NAME",
	  "Copy the file FILE, or standard input if FILE is -, into the object\n"
	  "NAME, and make it durable before exiting.\n"
	  "\n"
	  "  -f, --force               replace NAME if it exists (without it, an\n"
	  "                            existing object is an error and is left\n"
	  "                            alone)\n"
	  "  -c, --compression CODEC   none, zstd (level 1) or zstd:1 .. zstd:19\n"
	  "                            (default zstd:1); a blob that does not\n"
	  "                            shrink by 12.5 % is stored raw\n"
	  "\n"
	  "The bytes go to a temporary object (.coil-put.NAME.XXXXXXXXXXXXXXXX)\n"
	  "that is renamed to NAME, in one step, once all of them are written\n"
	  "and durable.  If the put fails or is interrupted, the temporary object\n"
	  "is removed and NAME is left as it was (with --force: the old contents\n"
	  "stay).  Only a put killed outright (SIGKILL, power cut) can leave a\n"
	  "temporary object behind; 'coil rm' removes it.\n" },
	{ "get", cmd_get,
	  "coil get STORE NAME FILE",
	  "copy the object NAME into FILE (- for stdout)",
	  "Copy the object NAME into the file FILE, or standard output if FILE\n"
	  "is -.  The bytes go to a temporary file next to FILE, which is\n"
	  "renamed over FILE only when every byte was read and verified; on any\n"
	  "failure FILE is untouched and the temporary file removed.  (Standard\n"
	  "output cannot be taken back: a failure there stops mid-stream.)\n" },
	{ "import", cmd_import,
	  "coil import [-f] [-c CODEC] STORE DIR",
	  "copy every file under DIR into an object named by its path",
	  "Copy every regular file under DIR, in every subdirectory, into the\n"
	  "object named by its path relative to DIR (DIR/sys/types.h becomes\n"
	  "sys/types.h), and make them durable before exiting.  Symbolic links\n"
	  "are not followed; they and other files that are not regular (FIFOs,\n"
	  "sockets, devices) are skipped with a note on stderr.\n"
	  "\n"
	  "  -f, --force               replace objects that exist (without it,\n"
	  "                            such a file is an error and the object is\n"
	  "                            left alone)\n"
	  "  -c, --compression CODEC   as for 'coil put'\n"
	  "\n"
	  "Each file is copied as 'coil put' copies one: to a temporary object\n"
	  "renamed to its name once every byte is written, so a file that fails\n"
	  "(unreadable, store full, a name over 255 bytes) leaves no object; it\n"
	  "is reported and the others are still imported, and the exit status\n"
	  "is then 1.  The last line on stdout counts the files and bytes\n"
	  "imported.\n" },
	{ "export", cmd_export,
	  "coil export STORE DIR",
	  "copy every object into a file under DIR named by its name",
	  "Copy every object into the file DIR/NAME, making DIR and the\n"
	  "directories of NAME's '/'-separated parts as needed (an object\n"
	  "sys/types.h becomes DIR/sys/types.h).  Each file is written as\n"
	  "'coil get' writes one: to a temporary file beside it, renamed over it\n"
	  "when every byte was read and verified; an existing file is replaced.\n"
	  "A name that would leave DIR (starting with '/', or with a '..'\n"
	  "component), or that has an empty or '.' component, is reported and\n"
	  "skipped, as is one whose directories would pass through a symbolic\n"
	  "link or a file; the others are still exported, and the exit status is\n"
	  "then 1.  The last line on stdout counts the objects and bytes\n"
	  "exported.\n" },
	{ "rm", cmd_rm,
	  "coil rm STORE NAME...",
	  "remove objects",
	  "Remove each object NAME.  A missing name is reported and the others\n"
	  "are still removed; the exit status is then 1.\n" },
	{ "mv", cmd_mv,
	  "coil mv [-n] STORE OLD NEW",
	  "rename an object",
	  "Rename the object OLD to NEW in one step.  An object already named\n"
	  "NEW is replaced (removed in the same step).\n"
	  "\n"
	  "  -n, --no-clobber   fail instead, leaving both objects as they were\n" },
	{ "cp", cmd_cp,
	  "coil cp [-f] STORE SRC DST",
	  "copy an object without copying its data (a clone)",
	  "Make DST a copy of SRC in one step.  The copy shares SRC's blocks:\n"
	  "nothing is read or written but metadata, whatever the size, and later\n"
	  "writes to either object diverge.  DST must not exist.\n"
	  "\n"
	  "  -f, --force   replace an existing DST (removed in the same step)\n" },
	{ "compact", cmd_compact,
	  "coil compact STORE",
	  "give free space back to the file system",
	  "Move live data from the segments nearest the end of a growing\n"
	  "store's file into free segments nearer the front, then cut the free\n"
	  "segments at the end off (what removed objects, the cleaner and the\n"
	  "optimizer emptied), down to the size a new store starts with, and\n"
	  "print the bytes given back.  Safe to interrupt at any point.\n" },
	{ "optimize", cmd_optimize,
	  "coil optimize [--level N] STORE",
	  "encode cold data again, smaller",
	  "Encode the store's data again at zstd level N (default 19), blob by\n"
	  "blob: each candidate is decoded and compared byte for byte with the\n"
	  "original, and kept only if smaller.  First, each cohort of objects\n"
	  "(names sharing their first component, 'dir/' of 'dir/a/b') of at\n"
	  "least 4 MiB gets a zstd dictionary trained on a tenth of it, kept\n"
	  "only if it saves more than twice its own bytes.  Data written with the default\n"
	  "(zstd level 1) typically shrinks by a tenth to a fifth; data stored\n"
	  "raw because it did not compress stays as it is.  Blobs already\n"
	  "optimized are skipped, so a second run does nothing.  The segments\n"
	  "read are freed as the cleaner frees them.  Safe to interrupt at any\n"
	  "point; a later run goes on where this one stopped.  Prints what it\n"
	  "did on one line.\n"
	  "\n"
	  "  -l, --level N   zstd level 1..22 (default 19)\n" },
	{ "check", cmd_check,
	  "coil check [--deep] STORE",
	  "read every object and verify its checksums",
	  "Read every byte of every object (which verifies every checksum) and\n"
	  "report each damaged 64 KiB range on stderr, then a summary on stdout.\n"
	  "The store is opened read-only.\n"
	  "\n"
	  "  --deep   instead: verify every blob the objects reference (to the\n"
	  "           4 KiB sector for uncompressed data), both superblocks,\n"
	  "           the checkpoint and the journal in use, and cross-check\n"
	  "           every live-byte, extent and reference count against a\n"
	  "           walk of the metadata; each finding is one line on stdout\n"
	  "           (object and byte range, or the structure)\n"
	  "\n"
	  "Exit status: 0 no damage, 3 damage found in object data (or, without\n"
	  "--deep, the store's own metadata does not read back), 4 (--deep)\n"
	  "the store's metadata or accounting is damaged or the store does not\n"
	  "open, 1 the check could not run.\n" },
	{ "scrub", cmd_scrub,
	  "coil scrub [--rate SIZE] STORE",
	  "read back and verify every blob and the metadata",
	  "Run one scrub pass: read back every blob an object references and\n"
	  "verify it (checksums; compressed blobs are decompressed), and both\n"
	  "superblocks, the checkpoint and the journal in use.  Each finding is\n"
	  "one line on stdout (object and byte range, or the structure), then a\n"
	  "summary.  The store is opened read-only; nothing is repaired.\n"
	  "\n"
	  "  -r, --rate SIZE   read at most SIZE bytes a second (default: no\n"
	  "                    limit)\n"
	  "\n"
	  "Exit status: 0 no damage, 3 object data damaged, 4 the store's\n"
	  "metadata is damaged or the store does not open, 1 the scrub could\n"
	  "not run.\n" },
	{ "salvage", cmd_salvage,
	  "coil salvage STORE DIR",
	  "export every readable byte of a damaged store",
	  "Open STORE read-only with every fallback (the other superblock, a\n"
	  "layout rebuilt from a checkpoint found by scanning, the older\n"
	  "checkpoint, the journal alone) and copy each object into a file\n"
	  "under DIR/objects (names with bytes other than letters, digits, '-',\n"
	  "'_' and '.' are written with %XX).  Ranges that do not read back are\n"
	  "left as zeros (holes) and listed; DIR/report.txt (also printed) says\n"
	  "what metadata was given up on and what bytes were lost.  DIR may exist\n"
	  "but must not hold 'objects' or 'report.txt'.  Nothing is written to\n"
	  "STORE.\n"
	  "\n"
	  "Exit status: 0 everything read back, 3 something was lost (see the\n"
	  "report), 1 the salvage could not run.\n" },
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

const char *cli_synopsis(const char *name)
{
	const struct cmd *c = find_cmd(name);

	return c ? c->synopsis : "coil COMMAND ...";
}

static void print_usage(FILE *f)
{
	fprintf(f, "usage: coil COMMAND [OPTIONS] ARGUMENTS\n"
		   "       coil help [COMMAND] | --help | --version\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %-7s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "  %-7s %s\n", "help", "this text, or one command's");
	fprintf(f, "\n%s"
		   "FILE - is standard input (put) or standard output (get).\n"
		   "\n"
		   "Exit status: 0 success, 1 the operation failed (the reason is on\n"
		   "stderr), 2 bad command line, 3 damage found in object data,\n"
		   "4 damage found in the store's metadata (check --deep, scrub).\n"
		   "'coil COMMAND --help' describes one command; docs/cli.md has it all.\n",
		size_help);
}

static int cmd_help(const struct cmd *c)
{
	printf("usage: %s\n\n%s", c->synopsis, c->help);
	if (!strcmp(c->name, "create"))
		printf("\n%s", size_help);
	return CLI_OK;
}

static void on_signal(int sig)
{
	(void)sig;
	cli_interrupted = 1;
}

int main(int argc, char **argv)
{
	const struct cmd *c;
	struct sigaction sa;

	if (argc < 2) {
		fprintf(stderr, "coil: no command given\n");
		print_usage(stderr);
		return CLI_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    (!strcmp(argv[1], "help") && argc == 2)) {
		print_usage(stdout);
		return CLI_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("coil %s\n", COIL_VERSION);
		return CLI_OK;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc > 3) {
			fprintf(stderr, "coil: help: one command at a time\n");
			return CLI_USAGE;
		}
		c = find_cmd(argv[2]);
		if (!c) {
			fprintf(stderr, "coil: help: unknown command '%s' (see "
				"'coil --help')\n", argv[2]);
			return CLI_USAGE;
		}
		return cmd_help(c);
	}
	c = find_cmd(argv[1]);
	if (!c) {
		fprintf(stderr, "coil: unknown command '%s' (see 'coil --help')\n",
			argv[1]);
		return CLI_USAGE;
	}
	/* No SA_RESTART: a read from a pipe returns EINTR, and the copy
	 * loops clean up (remove the half-made object or file) and stop. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return cmd_help(c);
	return c->run(argc - 1, argv + 1);
}

/* ---- create -------------------------------------------------------------- */

/* Check the codec here, so the message can name the option and list the
 * accepted values (coil_open only says -EINVAL). */
static bool codec_ok(const char *spec)
{
	char *end;
	long v;

	if (!strcmp(spec, "none") || !strcmp(spec, "zstd"))
		return true;
	if (strncmp(spec, "zstd:", 5) || spec[5] < '0' || spec[5] > '9')
		return false;
	errno = 0;
	v = strtol(spec + 5, &end, 10);
	return !errno && !*end && v >= 1 && v <= 19;
}

int cli_codec_check(const char *opt, const char *spec)
{
	if (!spec || codec_ok(spec))
		return 0;
	cli_err("%s '%s': unknown codec (use none, zstd or zstd:1..19)", opt,
		spec);
	return CLI_USAGE;
}

int cmd_create(int argc, char **argv)
{
	const char *codec = NULL, *codec_opt = "--compression";
	const struct cli_opt opts[] = {
		{ "--compression", 'c', &codec, NULL },
		{ 0 },
	};
	struct coil_options o;
	char *pos[3], h1[32], h2[32];
	uint64_t size;
	coil_store *s;
	struct stat st;
	bool blk = false;
	int npos, rc;

	rc = cli_parse_args("create", argc, argv, opts, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos < 2)
		return cli_usage_error("create", "expected STORE SIZE");
	if (npos == 3) {
		if (codec)
			return cli_usage_error("create", "the codec is given twice");
		codec = pos[2];
		codec_opt = "compression";
	}
	rc = cli_parse_size(pos[1], &size);
	if (rc < 0) {
		cli_err("create: size '%s': %s (use a byte count or K, M, G, T: "
			"64M, 2G)", pos[1],
			rc == -ERANGE ? "too large" : "not a size");
		return CLI_USAGE;
	}
	if (cli_codec_check(codec_opt, codec))
		return CLI_USAGE;
	if (stat(pos[0], &st) == 0) {
		blk = S_ISBLK(st.st_mode);
		if (!blk) {
			cli_err("create '%s': %s (create never formats over a "
				"file; remove it first)", pos[0],
				S_ISDIR(st.st_mode) ? "is a directory" :
						      "already exists");
			return CLI_FAIL;
		}
	}
	if (!blk && size && size < COIL_MIN_SIZE) {
		cli_err("create '%s': store too small: minimum is %llu MiB "
			"(asked for %s)", pos[0],
			(unsigned long long)(COIL_MIN_SIZE >> 20),
			cli_human(size, h1, sizeof(h1)));
		return CLI_FAIL;
	}
	coil_options_init(&o);
	o.flags = COIL_CREATE;
	o.size = size;
	if (codec)
		o.compression = codec;
	rc = coil_open(pos[0], &o, &s);
	if (rc == -EINVAL) {
		o.flags |= COIL_NO_DIRECT; /* tmpfs and the like */
		rc = coil_open(pos[0], &o, &s);
	}
	if (rc == -ENOSPC)
		cli_err("create '%s': not enough space on the file system for "
			"%s", pos[0], cli_human(size, h2, sizeof(h2)));
	else if (rc < 0)
		cli_err("create '%s': %s", pos[0], cli_reason(rc));
	if (rc < 0)
		return CLI_FAIL;
	return cli_close_store(pos[0], s) < 0 ? CLI_FAIL : CLI_OK;
}
