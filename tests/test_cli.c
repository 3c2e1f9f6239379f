/* tests/test_cli.c — the coil command-line tool, run as a user runs it:
 * the built binary (COIL_CLI_PATH) is forked and exec'd in a directory of
 * its own, and each test checks the exit status, the exact stdout/stderr
 * text that matters, and that the directory holds nothing it should not
 * (no half-made store, object, output or temporary file). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <pty.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/cli_run.h"

#ifndef COIL_CLI_PATH
#error "meson passes the path of the built coil tool"
#endif

static char dir[64];

static void setup_dir(void)
{
	strcpy(dir, "cli-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

/* A path inside the test's directory (a rotating set of buffers). */
static const char *P(const char *name)
{
	static char bufs[8][512];
	static int next;
	char *b = bufs[next++ & 7];

	snprintf(b, 512, "%s/%s", dir, name);
	return b;
}

/* Run coil with the NULL-terminated arguments; stdin from @in (NULL:
 * /dev/null); stdout and stderr kept in files outside the checked set. */
#define coil_run(in, ...) \
	cli_runv(dir, (in), (const char *const[]){ __VA_ARGS__ })


#define expect(r, code, outtext, errtext)                                      \
	do {                                                                   \
		cr_expect_eq((r).status, (code), "exit %d, stderr: %s",        \
			     (r).status, (r).err);                             \
		if ((outtext))                                                 \
			cr_expect_str_eq((r).out, (const char *)(outtext));    \
		if ((errtext))                                                 \
			cr_expect_str_eq((r).err, (const char *)(errtext));    \
	} while (0)

/* The names in the test directory, sorted, joined by spaces. */
static char *listing(void)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	char *s = calloc(1, 4096);

	cr_assert(n >= 0);
	for (int i = 0; i < n; i++) {
		if (strcmp(ents[i]->d_name, ".") && strcmp(ents[i]->d_name, "..")) {
			if (*s)
				strcat(s, " ");
			strncat(s, ents[i]->d_name, 4096 - strlen(s) - 2);
		}
		free(ents[i]);
	}
	free(ents);
	return s;
}

static void expect_listing(const char *want)
{
	char *got = listing();

	cr_expect_str_eq(got, want, "directory holds '%s', expected '%s'", got, want);
	free(got);
}

/* Remove @path and everything under it (import and export leave trees). */
static void rm_tree(const char *path)
{
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (lstat(path, &st) < 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlink(path);
		return;
	}
	d = opendir(path);
	while (d && (de = readdir(d)) != NULL) {
		char sub[1024];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		rm_tree(sub);
	}
	if (d)
		closedir(d);
	rmdir(path);
}

static void teardown_dir(void)
{
	rm_tree(dir);
}

static void write_file(const char *path, size_t len, unsigned seed, bool random)
{
	FILE *f = fopen(path, "wb");
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	cr_assert_not_null(f);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		fputc(random ? (int)(x & 0xff) : "coil stores text\n"[i % 17], f);
	}
	fclose(f);
}

static bool same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *x = cr_slurp(a, &la), *y = cr_slurp(b, &lb);
	bool same = la == lb && !memcmp(x, y, la);

	free(x);
	free(y);
	return same;
}

static void make_store(const char *name, const char *size, const char *codec)
{
	struct cli_run r = coil_run(NULL, "create", P(name), size, "-c", codec, NULL);

	expect(r, 0, "", "");
	cli_run_free(&r);
}

TestSuite(cli, .init = setup_dir, .fini = teardown_dir, .timeout = 120);

/* ---- help, version, usage ----------------------------------------------- */

Test(cli, help_goes_to_stdout_with_status_0)
{
	const char *forms[][3] = { { "--help" }, { "-h" }, { "help" } };

	for (int i = 0; i < 3; i++) {
		struct cli_run r = coil_run(NULL, forms[i][0], NULL);
		expect(r, 0, NULL, "");
		cr_expect(strstr(r.out, "usage: coil COMMAND") != NULL);
		cr_expect(strstr(r.out, "Exit status: 0 success, 1") != NULL);
		cr_expect(strstr(r.out, "K, M, G or T") != NULL);
		cr_expect(strstr(r.out, "FILE - is standard input") != NULL);
		cli_run_free(&r);
	}
	const char *cmds[] = { "create", "ls", "stats", "put", "get", "rm", "mv",
			       "cp", "check", "import", "export" };
	for (int i = 0; i < 11; i++) {
		struct cli_run a = coil_run(NULL, "help", cmds[i], NULL);
		struct cli_run b = coil_run(NULL, cmds[i], "--help", NULL);
		char want[64];

		snprintf(want, sizeof(want), "usage: coil %s ", cmds[i]);
		expect(a, 0, NULL, "");
		expect(b, 0, a.out, "");
		cr_expect(strncmp(a.out, want, strlen(want)) == 0, "%s", a.out);
		cr_expect(!strstr(a.out, "%%"), "help text is not a format: %s", a.out);
		cli_run_free(&a);
		cli_run_free(&b);
	}
	expect_listing("");
}

Test(cli, version_is_the_project_version)
{
	struct cli_run r = coil_run(NULL, "--version", NULL);

	expect(r, 0, "coil " COIL_VERSION_EXPECTED "\n", "");
	cli_run_free(&r);
}

Test(cli, usage_errors_are_status_2)
{
	struct cli_run r = coil_run(NULL, NULL);

	expect(r, 2, "", NULL);
	cr_expect(strncmp(r.err, "coil: no command given\nusage:", 29) == 0);
	cli_run_free(&r);
	r = coil_run(NULL, "frob", NULL);
	expect(r, 2, "", "coil: unknown command 'frob' (see 'coil --help')\n");
	cli_run_free(&r);
	r = coil_run(NULL, "help", "frob", NULL);
	expect(r, 2, "", "coil: help: unknown command 'frob' (see 'coil --help')\n");
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("s"), "a", NULL);
	expect(r, 2, "", "coil: put: expected STORE NAME FILE\n"
			 "usage: coil put [-f] [-c CODEC] STORE NAME FILE\n"
			 "(see 'coil help put')\n");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", "-x", P("s"), NULL);
	expect(r, 2, "", NULL);
	cr_expect(strncmp(r.err, "coil: ls: unknown option '-x'\n", 30) == 0);
	cli_run_free(&r);
	r = coil_run(NULL, "stats", "--pretty", P("s"), NULL);
	expect(r, 2, "", NULL);
	cr_expect(strstr(r.err, "--pretty goes with --json") != NULL);
	cli_run_free(&r);
	expect_listing("");
}

/* ---- create ------------------------------------------------------------- */

Test(cli, create_sizes)
{
	const char *ok[][2] = { { "a", "6M" }, { "b", "8m" }, { "c", "8MiB" },
				{ "d1", "8388608" }, { "e", "6144K" } };
	const uint64_t bytes[] = { 6 << 20, 8 << 20, 8 << 20, 8 << 20, 6 << 20 };
	struct stat st;
	struct cli_run r;

	for (int i = 0; i < 5; i++) {
		r = coil_run(NULL, "create", P(ok[i][0]), ok[i][1], NULL);
		expect(r, 0, "", "");
		cr_assert_eq(stat(P(ok[i][0]), &st), 0);
		cr_expect_eq((uint64_t)st.st_size, bytes[i], "%s", ok[i][1]);
		cli_run_free(&r);
	}
	/* the smallest store holds data too */
	write_file(P("14k"), 14000, 9, true);
	r = coil_run(NULL, "put", P("a"), "x", P("14k"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("a"), "x", P("14k.back"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	cr_expect(same_file(P("14k"), P("14k.back")));
	r = coil_run(NULL, "create", P("small"), "6140K", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "': store too small: minimum is 6 MiB (asked for "
				"6.0 MiB)\n") != NULL, "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "create", P("bad"), "64X", NULL);
	expect(r, 2, "", "coil: create: size '64X': not a size (use a byte count "
			 "or K, M, G, T: 64M, 2G)\n");
	cli_run_free(&r);
	r = coil_run(NULL, "create", P("huge"), "99999999T", NULL);
	expect(r, 2, "", NULL);
	cr_expect(strstr(r.err, "too large") != NULL);
	cli_run_free(&r);
	/* An existing file is never formatted over. */
	r = coil_run(NULL, "create", P("a"), "8M", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "': already exists (create never formats over "
				"a file; remove it first)\n") != NULL);
	cli_run_free(&r);
	expect_listing("14k 14k.back a b c d1 e");
}

Test(cli, create_codecs)
{
	struct cli_run r = coil_run(NULL, "create", P("s"), "8M", "--compression", "lz9", NULL);

	expect(r, 2, "", "coil: --compression 'lz9': unknown codec (use none, "
			 "zstd or zstd:1..19)\n");
	cli_run_free(&r);
	r = coil_run(NULL, "create", P("s"), "8M", "zstd:20", NULL);
	expect(r, 2, "", "coil: compression 'zstd:20': unknown codec (use none, "
			 "zstd or zstd:1..19)\n");
	cli_run_free(&r);
	expect_listing("");
	const char *good[] = { "none", "zstd", "zstd:19", "zstd:1" };
	for (int i = 0; i < 4; i++) {
		char name[8];
		snprintf(name, sizeof(name), "s%d", i);
		r = coil_run(NULL, "create", P(name), "8M", "--compression", good[i], NULL);
		expect(r, 0, "", "");
		cli_run_free(&r);
	}
	r = coil_run(NULL, "create", P("p"), "8M", "zstd:3", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	/* The codec that counts is the one of the open that writes. */
	write_file(P("t"), 100000, 1, false);
	r = coil_run(NULL, "put", "-c", "zstd:40", P("p"), "x", P("t"), NULL);
	expect(r, 2, "", "coil: --compression 'zstd:40': unknown codec (use none, "
			 "zstd or zstd:1..19)\n");
	cli_run_free(&r);
	r = coil_run(NULL, "put", "-c", "none", P("p"), "raw", P("t"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("p"), "packed", P("t"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "stats", "--json", P("p"), NULL);
	expect(r, 0, NULL, "");
	/* 100000 raw bytes plus a few hundred for the text twice over. */
	{
		const char *st = strstr(r.out, "\"stored\":");
		cr_assert_not_null(st);
		long stored = strtol(st + 9, NULL, 10);
		cr_expect(stored > 100000 && stored < 110000, "stored %ld", stored);
	}
	cli_run_free(&r);
	expect_listing("p s0 s1 s2 s3 t");
}

/* ---- opening what is not a (healthy) store ------------------------------ */

Test(cli, open_errors_name_the_cause)
{
	struct cli_run r;

	write_file(P("text.txt"), 20000, 1, false);
	r = coil_run(NULL, "ls", P("text.txt"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "text.txt': not a coil store (no valid superblock)\n"),
		  "%s", r.err);
	cli_run_free(&r);
	write_file(P("tiny"), 10, 1, false);
	r = coil_run(NULL, "stats", P("tiny"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "tiny': not a coil store"), "%s", r.err);
	cli_run_free(&r);
	mkdir(P("d"), 0755);
	r = coil_run(NULL, "ls", P("d"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: ls: open '") && strstr(r.err, "/d': is a directory\n"),
		  "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("d"), "x", P("text.txt"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "/d': is a directory\n"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("nothere"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "nothere': no such file (make one with 'coil create')\n"),
		  "%s", r.err);
	cli_run_free(&r);
	expect_listing("d text.txt tiny");
}

/* Both superblock copies keep coil's magic but fail their checksum: a
 * damaged store, reported apart from a foreign file; check says 3. */
Test(cli, damaged_superblocks_are_not_foreign)
{
	uint8_t b;
	struct cli_run r;
	int fd;

	make_store("s", "8M", "zstd");
	fd = open(P("s"), O_RDWR);
	for (off_t off = 40; off <= FMT_BLOCK + 40; off += FMT_BLOCK) {
		cr_assert_eq(pread(fd, &b, 1, off), 1);
		b ^= 0x10;
		cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	}
	close(fd);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "s': damaged store or device error"), "%s", r.err);
	cr_expect(!strstr(r.err, "not a coil store"));
	cli_run_free(&r);
	r = coil_run(NULL, "check", P("s"), NULL);
	expect(r, 3, "", NULL);
	cr_expect(strstr(r.err, "damaged store"), "%s", r.err);
	cli_run_free(&r);
	expect_listing("s");
}

/* ---- put, get, ls, rm ---------------------------------------------------- */

Test(cli, put_get_round_trip_sorted_ls)
{
	struct cli_run r;

	make_store("s", "64M", "zstd");
	write_file(P("big"), (9u << 20) + 123, 7, false);
	write_file(P("rnd"), 300000, 8, true);
	const char *names[] = { "zeta", "alpha", "mid" };
	for (int i = 0; i < 3; i++) {
		r = coil_run(NULL, "put", P("s"), names[i], P(i ? "rnd" : "big"), NULL);
		expect(r, 0, "", "");
		cli_run_free(&r);
	}
	/* stdin */
	r = coil_run(P("rnd"), "put", P("s"), "from-stdin", "-", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "alpha\nfrom-stdin\nmid\nzeta\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", "-l", P("s"), NULL);
	expect(r, 0, NULL, "");
	{
		/* Random bytes are stored raw (their share is exact); the text
		 * compresses far; the column adds up to the store's stored. */
		const char *want[] = { "alpha", "from-stdin", "mid", "zeta" };
		unsigned long long size, stored, sum = 0;
		char name[32];
		const char *p = r.out;
		int k;

		for (int i = 0; i < 4; i++) {
			cr_assert_eq(sscanf(p, "%llu %llu %31s%n", &size, &stored,
					    name, &k), 3, "line %d of: %s", i, r.out);
			cr_expect_str_eq(name, want[i]);
			if (i < 3)
				cr_expect(size == 300000 && stored == 300000,
					  "%s: %llu %llu", name, size, stored);
			else
				cr_expect(size == 9437307 && stored > 0 &&
					  stored < size / 10, "%llu %llu", size, stored);
			sum += stored;
			p += k;
		}
		cli_run_free(&r);
		r = coil_run(NULL, "stats", "--json", P("s"), NULL);
		expect(r, 0, NULL, "");
		const char *st = strstr(r.out, "\"stored\":");
		cr_assert_not_null(st);
		cr_expect_eq(strtoull(st + 9, NULL, 10), sum, "stats %s vs %llu", st, sum);
	}
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "zeta", P("zeta.out"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("big"), P("zeta.out")));
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "from-stdin", "-", NULL);
	expect(r, 0, NULL, "");
	{
		size_t n;
		char *want = cr_slurp(P("rnd"), &n);
		cr_expect(!memcmp(r.out, want, n), "stdout differs");
		free(want);
	}
	cli_run_free(&r);
	/* get over an existing file replaces it. */
	r = coil_run(NULL, "get", P("s"), "alpha", P("zeta.out"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("rnd"), P("zeta.out")));
	cli_run_free(&r);
	/* ... and through a symbolic link, which stays a link. */
	{
		struct stat st;
		cr_assert_eq(symlink("zeta.out", P("link")), 0);
		r = coil_run(NULL, "get", P("s"), "zeta", P("link"), NULL);
		expect(r, 0, "", "");
		cli_run_free(&r);
		cr_assert_eq(lstat(P("link"), &st), 0);
		cr_expect(S_ISLNK(st.st_mode));
		cr_expect(same_file(P("big"), P("zeta.out")));
	}
	r = coil_run(NULL, "check", P("s"), NULL);
	expect(r, 0, "checked 4 objects, 9.9 MiB (10337307 bytes): no damage\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "rm", P("s"), "mid", "nope", "alpha", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: rm: no object 'nope' in store '"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "from-stdin\nzeta\n", "");
	cli_run_free(&r);
	expect_listing("big link rnd s zeta.out");
}

Test(cli, put_refuses_to_overwrite_without_force)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("one"), 1000, 1, true);
	write_file(P("two"), 5000, 2, true);
	r = coil_run(NULL, "put", P("s"), "obj", P("one"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("s"), "obj", P("two"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: put: object 'obj' already exists in store '") &&
		  strstr(r.err, "' (--force replaces it)\n"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "obj", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")), "the old object is untouched");
	cli_run_free(&r);
	r = coil_run(NULL, "put", "--force", P("s"), "obj", P("two"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "obj", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("two"), P("got")));
	cli_run_free(&r);
	expect_listing("got one s two");
}

Test(cli, failed_put_leaves_no_object)
{
	struct cli_run r;

	make_store("s", "8M", "none");
	r = coil_run(NULL, "put", P("s"), "x", P("missing.txt"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: put: cannot read '") &&
		  strstr(r.err, "missing.txt': No such file or directory\n"), "%s", r.err);
	cli_run_free(&r);
	mkdir(P("d"), 0755);
	r = coil_run(NULL, "put", P("s"), "x", P("d"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "d': Is a directory\n"), "%s", r.err);
	cli_run_free(&r);
	/* A store too small for the file: full half way. */
	write_file(P("big"), 16u << 20, 3, true);
	r = coil_run(NULL, "put", P("s"), "big", P("big"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: put: writing object 'big' to store '") &&
		  strstr(r.err, "': store is full\n"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	/* The same with --force over an existing object: the put goes to a
	 * temporary object, which is removed; the old object stays whole. */
	write_file(P("small"), 1000, 4, true);
	r = coil_run(NULL, "put", P("s"), "big", P("small"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "put", "-f", P("s"), "big", P("big"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: put: writing object 'big' to store '") &&
		  strstr(r.err, "': store is full\n"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "big\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "big", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("small"), P("got")), "the old object is untouched");
	cli_run_free(&r);
	/* ... and the space of the removed temporary objects is usable. */
	r = coil_run(NULL, "put", P("s"), "ok", P("small"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "big\nok\n", "");
	cli_run_free(&r);
	expect_listing("big d got s small");
}

/* A name so long that the temporary object's name cannot hold it whole
 * (it then holds a hash of it): the put still lands under that name. */
Test(cli, put_under_the_longest_name)
{
	char name[COIL_NAME_MAX + 2], line[COIL_NAME_MAX + 3];
	const char *want = line;
	struct cli_run r;

	make_store("s", "8M", "zstd");
	write_file(P("one"), 3000, 1, true);
	memset(name, 'n', COIL_NAME_MAX);
	name[COIL_NAME_MAX] = 0;
	r = coil_run(NULL, "put", P("s"), name, P("one"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	snprintf(line, sizeof(line), "%s\n", name);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, want, "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), name, P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	/* One byte more is refused before anything is written. */
	name[COIL_NAME_MAX] = 'n';
	name[COIL_NAME_MAX + 1] = 0;
	r = coil_run(NULL, "put", P("s"), name, P("one"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "': name too long (at most 255 bytes)\n"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, want, "");
	cli_run_free(&r);
	expect_listing("got one s");
}

/* ---- mv ------------------------------------------------------------------ */

Test(cli, cp_clones_and_replaces)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("one"), 300000, 1, true);
	write_file(P("two"), 70000, 2, false);
	r = coil_run(NULL, "put", P("s"), "a", P("one"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("s"), "c", P("two"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "cp", P("s"), "a", "b", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "b", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "a", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	/* onto an existing object: refused, both unchanged; -f replaces */
	r = coil_run(NULL, "cp", P("s"), "a", "c", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: cp: object 'c' already exists in store '"),
		  "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "c", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("two"), P("got")));
	cli_run_free(&r);
	r = coil_run(NULL, "cp", "-f", P("s"), "a", "c", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "c", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "a\nb\nc\n", "");
	cli_run_free(&r);
	/* a missing source */
	r = coil_run(NULL, "cp", P("s"), "zz", "q", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: cp: no object 'zz' in store '"), "%s",
		  r.err);
	cli_run_free(&r);
}

Test(cli, mv_renames_and_replaces)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("one"), 1000, 1, true);
	write_file(P("two"), 70000, 2, false);
	r = coil_run(NULL, "put", P("s"), "a", P("one"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "mv", P("s"), "a", "b", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "b\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "b", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "a", P("got"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: get: no object 'a' in store '"), "%s", r.err);
	cli_run_free(&r);
	/* Onto an existing object: it is replaced. */
	r = coil_run(NULL, "put", P("s"), "c", P("two"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "mv", P("s"), "c", "b", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", "-l", P("s"), NULL);
	expect(r, 0, NULL, "");
	cr_expect(strncmp(r.out, "70000  ", 7) == 0 && strstr(r.out, "  b\n") &&
		  !strchr(strchr(r.out, '\n') + 1, '\n'), "%s", r.out);
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "b", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("two"), P("got")));
	cli_run_free(&r);
	/* Options go anywhere, "--" ends them. */
	r = coil_run(NULL, "mv", P("s"), "--", "b", "-b", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "-b\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "check", P("s"), NULL);
	expect(r, 0, NULL, "");
	cli_run_free(&r);
	expect_listing("got one s two");
}

Test(cli, mv_no_clobber_and_errors)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("one"), 1000, 1, true);
	write_file(P("two"), 2000, 2, true);
	r = coil_run(NULL, "put", P("s"), "a", P("one"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("s"), "b", P("two"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	const char *forms[] = { "-n", "--no-clobber" };
	for (int i = 0; i < 2; i++) {
		r = coil_run(NULL, "mv", forms[i], P("s"), "a", "b", NULL);
		expect(r, 1, "", NULL);
		cr_expect(strstr(r.err, "coil: mv: object 'b' already exists in store '") &&
			  strstr(r.err, "' (--no-clobber: nothing renamed)\n"),
			  "%s", r.err);
		cli_run_free(&r);
	}
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "a\nb\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "a", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("one"), P("got")));
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "b", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("two"), P("got")));
	cli_run_free(&r);
	/* -n onto a free name renames. */
	r = coil_run(NULL, "mv", "-n", P("s"), "a", "c", NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	/* A missing object. */
	r = coil_run(NULL, "mv", P("s"), "nope", "d", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: mv: no object 'nope' in store '"), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "b\nc\n", "");
	cli_run_free(&r);
	/* Names the store cannot hold; the command line. */
	{
		char longname[COIL_NAME_MAX + 2];

		memset(longname, 'x', COIL_NAME_MAX + 1);
		longname[COIL_NAME_MAX + 1] = 0;
		r = coil_run(NULL, "mv", P("s"), "b", longname, NULL);
		expect(r, 1, "", "coil: mv: object name 'xxxxxxxxxxxxxxxxxxxxxxxx"
				 "xxxxxxxxxxxxxxxx...' is too long (at most 255 "
				 "bytes)\n");
		cli_run_free(&r);
	}
	r = coil_run(NULL, "mv", P("s"), "", "b", NULL);
	expect(r, 1, "", "coil: mv: object name '' is empty\n");
	cli_run_free(&r);
	r = coil_run(NULL, "mv", P("s"), "b", NULL);
	expect(r, 2, "", "coil: mv: expected STORE OLD NEW\n"
			 "usage: coil mv [-n] STORE OLD NEW\n"
			 "(see 'coil help mv')\n");
	cli_run_free(&r);
	r = coil_run(NULL, "mv", P("nothere"), "b", "c", NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "nothere': no such file (make one with 'coil create')\n"),
		  "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "b\nc\n", "");
	cli_run_free(&r);
	expect_listing("got one s two");
}

Test(cli, failed_get_leaves_no_file)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	r = coil_run(NULL, "get", P("s"), "foo", P("out"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: get: no object 'foo' in store '") &&
		  strstr(r.err, "/s'\n"), "%s", r.err);
	cli_run_free(&r);
	/* A missing object leaves an existing destination as it was. */
	write_file(P("keep"), 100, 5, true);
	write_file(P("orig"), 100, 5, true);
	r = coil_run(NULL, "get", P("s"), "foo", P("keep"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(same_file(P("keep"), P("orig")));
	cli_run_free(&r);
	r = coil_run(NULL, "put", P("s"), "o", P("orig"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "o", P("nodir/out"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "nodir/out': No such file or directory\n"), "%s", r.err);
	cli_run_free(&r);
	mkdir(P("d"), 0755);
	r = coil_run(NULL, "get", P("s"), "o", P("d"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "d': Is a directory\n"), "%s", r.err);
	cli_run_free(&r);
	expect_listing("d keep orig s");
}

/* Damage in the data area: get fails after writing part of the file, and
 * neither the destination nor its temporary file remain; check exits 3
 * and names the range. */
Test(cli, get_of_damaged_object)
{
	struct fmt_super sb;
	uint8_t blk[2 * FMT_BLOCK];
	struct cli_run r;
	int fd;

	make_store("s", "64M", "none");
	write_file(P("rnd"), 6u << 20, 9, true);
	r = coil_run(NULL, "put", P("s"), "obj", P("rnd"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	fd = open(P("s"), O_RDWR);
	cr_assert_eq(pread(fd, blk, sizeof(blk), 0), (ssize_t)sizeof(blk));
	cr_assert_eq(fmt_super_decode(&sb, blk, FMT_BLOCK), 0);
	/* 4 MiB into the first data segments: past what get writes first. */
	for (uint64_t off = sb.data_off + (4u << 20); off < sb.data_off + (4u << 20) + 65536;
	     off += 512) {
		uint8_t b;
		cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
		b ^= 0xff;
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	}
	close(fd);
	r = coil_run(NULL, "get", P("s"), "obj", P("out"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "coil: get: reading object 'obj' from store '") &&
		  strstr(r.err, "': I/O error or damaged data (checksum mismatch)\n"),
		  "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "check", P("s"), NULL);
	expect(r, 3, NULL, NULL);
	cr_expect(strstr(r.out, "damaged ranges in 1 objects\n"), "%s", r.out);
	cr_expect(strstr(r.err, "coil: check: object 'obj' bytes ["), "%s", r.err);
	cli_run_free(&r);
	expect_listing("rnd s");
}

/* get never replaces a FIFO (or a device) with a regular file */
Test(cli, get_refuses_a_fifo)
{
	struct cli_run r;
	struct stat st;

	make_store("s", "64M", "none");
	write_file(P("f"), 5000, 3, false);
	r = coil_run(NULL, "put", P("s"), "obj", P("f"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	cr_assert_eq(mkfifo(P("pipe"), 0644), 0);
	r = coil_run(NULL, "get", P("s"), "obj", P("pipe"), NULL);
	expect(r, 1, "", NULL);
	cr_expect(strstr(r.err, "pipe': not a regular file"), "%s", r.err);
	cli_run_free(&r);
	cr_assert_eq(lstat(P("pipe"), &st), 0);
	cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	expect_listing("f pipe s");
}

/* ---- stats -------------------------------------------------------------- */

Test(cli, stats_human_and_json)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("t"), 200000, 1, false);
	r = coil_run(NULL, "put", P("s"), "t", P("t"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	r = coil_run(NULL, "stats", P("s"), NULL);
	expect(r, 0, NULL, "");
	const char *want[] = { "\nspace\n", "  logical          195.3 KiB ",
			       "  ratio            ", "  free             ",
			       "  allocated        ", "  objects          1 (",
			       "  cache            ", "  pool             ",
			       "  open             ",
			       "  prefetch         on, " };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(r.out, want[i]), "missing '%s' in:\n%s", want[i], r.out);
	/* closed cleanly: replay read nothing back */
	cr_expect(!strstr(r.out, "replay read back"), "%s", r.out);
	cli_run_free(&r);
	r = coil_run(NULL, "stats", "--json", P("s"), NULL);
	expect(r, 0, NULL, "");
	cr_expect(r.out[0] == '{' && strchr(r.out, '\n') == r.out + strlen(r.out) - 1,
		  "one line of JSON");
	cr_expect(strstr(r.out, "\"space\":{\"logical\":200000,"), "%s", r.out);
	cli_run_free(&r);
	r = coil_run(NULL, "stats", "--json", "--pretty", P("s"), NULL);
	expect(r, 0, NULL, "");
	{
		const char *head = "{\n  \"store\": {\n    \"size\": 16777216,\n";
		cr_expect(strncmp(r.out, head, strlen(head)) == 0, "%s", r.out);
	}
	cr_expect(strstr(r.out, "\n  \"space\": {\n    \"logical\": 200000,\n"));
	cr_expect(strstr(r.out, "\"live_fraction_histogram\": [0, "));
	cli_run_free(&r);
	expect_listing("s t");
}

/* After a crash, the open row's second line names the data replay read
 * back: a child writes 64 KiB pieces (each a data write and a record) and
 * leaves without a flush, so no chunk says a flush covered them. */
Test(cli, stats_names_the_data_replay_read_back)
{
	struct cli_run r;
	pid_t pid;
	int st;

	make_store("k", "64M", "none");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		static uint8_t buf[65536];
		struct coil_options o;
		coil_store *s;
		coil_obj *h;

		uint64_t x = 0x9e3779b97f4a7c15ull;

		/* incompressible: blobs as large as the writes */
		for (size_t i = 0; i < sizeof(buf); i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		coil_options_init(&o);
		if (coil_open(P("k"), &o, &s) != 0 ||
		    coil_obj_open(s, "o", COIL_CREATE, &h) != 0)
			_exit(2);
		for (uint64_t i = 0; i < 4; i++)
			if (coil_pwrite(h, buf, sizeof(buf), i * sizeof(buf)) !=
			    (int64_t)sizeof(buf))
				_exit(3);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	r = coil_run(NULL, "stats", P("k"), NULL);
	expect(r, 0, NULL, "");
	cr_expect(strstr(r.out, "\n                   replay read back "),
		  "no line for the data read back in:\n%s", r.out);
	cli_run_free(&r);
}

/* ---- import, export ------------------------------------------------------ */

/* Every path under @root, relative to it, sorted, a directory with a '/'
 * after it, joined by spaces (appended to @out, @cap bytes). */
static void tree_walk(const char *root, const char *rel, char *out, size_t cap)
{
	struct dirent **ents;
	char path[1024];
	int n;

	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	n = scandir(path, &ents, NULL, alphasort);
	cr_assert(n >= 0, "scandir %s", path);
	for (int i = 0; i < n; i++) {
		const char *nm = ents[i]->d_name;
		char sub[1024], full[1100];
		struct stat st;

		if (strcmp(nm, ".") && strcmp(nm, "..")) {
			snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", nm);
			snprintf(full, sizeof(full), "%s/%s", root, sub);
			cr_assert_eq(lstat(full, &st), 0, "%s", full);
			if (*out)
				strncat(out, " ", cap - strlen(out) - 1);
			strncat(out, sub, cap - strlen(out) - 1);
			if (S_ISDIR(st.st_mode)) {
				strncat(out, "/", cap - strlen(out) - 1);
				tree_walk(root, sub, out, cap);
			}
		}
		free(ents[i]);
	}
	free(ents);
}

static void expect_tree(const char *root, const char *want)
{
	char got[4096] = "";

	tree_walk(root, "", got, sizeof(got));
	cr_expect_str_eq(got, want, "'%s' holds '%s', expected '%s'", root, got,
			 want);
}

static void put_file(const char *name, const char *file)
{
	struct cli_run r = coil_run(NULL, "put", P("s"), name, file, NULL);

	expect(r, 0, "", "");
	cli_run_free(&r);
}

/* A tree with nested directories, an empty file, a file over 1 MiB and
 * names with spaces goes in, comes out into a new directory two levels
 * deep, and every file compares byte for byte; a link and a FIFO are
 * skipped with a note, and the status stays 0. */
Test(cli, import_export_round_trip)
{
	const struct { const char *name; size_t len; bool random; } files[] = {
		{ "a/b/c/deep.txt", 5000, false },
		{ "a/b/name with space", 1234, true },
		{ "a/x.bin", 300000, true },
		{ "big", (1u << 20) + 4097, true },
		{ "empty", 0, false },
		{ "with space.txt", 17, false },
	};
	const size_t nfiles = sizeof(files) / sizeof(files[0]);
	char src[512], out[512], want_[1200], *want = want_, path[1100];
	unsigned long long total = 0;
	struct cli_run r;

	make_store("s", "64M", "zstd");
	snprintf(src, sizeof(src), "%s", P("src"));
	snprintf(out, sizeof(out), "%s", P("out/tree"));
	cr_assert_eq(mkdir(src, 0755), 0);
	cr_assert_eq(mkdir(P("src/a"), 0755), 0);
	cr_assert_eq(mkdir(P("src/a/b"), 0755), 0);
	cr_assert_eq(mkdir(P("src/a/b/c"), 0755), 0);
	cr_assert_eq(mkdir(P("src/a/none"), 0755), 0); /* no object for it */
	for (size_t i = 0; i < nfiles; i++) {
		snprintf(path, sizeof(path), "%s/%s", src, files[i].name);
		write_file(path, files[i].len, (unsigned)i + 1, files[i].random);
		total += files[i].len;
	}
	cr_assert_eq(symlink("big", P("src/link")), 0);
	cr_assert_eq(mkfifo(P("src/fifo"), 0644), 0);

	r = coil_run(NULL, "import", P("s"), src, NULL);
	snprintf(want, sizeof(want_),
		 "imported 6 files, %llu bytes (logical) from %s\n", total, src);
	expect(r, 0, want, NULL);
	snprintf(want, sizeof(want_), "coil: import: skipping '%s/link': a "
		 "symbolic link (not followed)\n", src);
	cr_expect(strstr(r.err, want), "%s", r.err);
	snprintf(want, sizeof(want_), "coil: import: skipping '%s/fifo': a FIFO\n",
		 src);
	cr_expect(strstr(r.err, want), "%s", r.err);
	{
		int lines = 0;

		for (const char *c = r.err; *c; c++)
			lines += *c == '\n';
		cr_expect_eq(lines, 2, "only the two notes: %s", r.err);
	}
	cli_run_free(&r);
	r = coil_run(NULL, "ls", "-l", P("s"), NULL);
	expect(r, 0, NULL, "");
	{
		const char *p = r.out;

		for (size_t i = 0; i < nfiles; i++) {
			unsigned long long size, stored;
			int k;

			cr_assert_eq(sscanf(p, "%llu %llu %n", &size, &stored, &k),
				     2, "%s", r.out);
			p += k;
			cr_expect(!strncmp(p, files[i].name, strlen(files[i].name)) &&
				  p[strlen(files[i].name)] == '\n', "%s", r.out);
			cr_expect_eq(size, files[i].len, "%s", files[i].name);
			p = strchr(p, '\n') + 1;
		}
		cr_expect_str_eq(p, "");
	}
	cli_run_free(&r);

	r = coil_run(NULL, "export", P("s"), out, NULL);
	snprintf(want, sizeof(want_), "exported 6 objects, %llu bytes to %s\n",
		 total, out);
	expect(r, 0, want, "");
	cli_run_free(&r);
	for (size_t i = 0; i < nfiles; i++) {
		char a[1100];

		snprintf(a, sizeof(a), "%s/%s", src, files[i].name);
		snprintf(path, sizeof(path), "%s/%s", out, files[i].name);
		cr_expect(same_file(a, path), "%s differs", files[i].name);
	}
	/* Nothing else: no temporary file, no link, no FIFO, no empty
	 * directory. */
	expect_tree(out, "a/ a/b/ a/b/c/ a/b/c/deep.txt a/b/name with space "
			 "a/x.bin big empty with space.txt");
	/* Again over the files it made: each is replaced. */
	r = coil_run(NULL, "export", P("s"), out, NULL);
	expect(r, 0, want, "");
	cli_run_free(&r);
	expect_tree(out, "a/ a/b/ a/b/c/ a/b/c/deep.txt a/b/name with space "
			 "a/x.bin big empty with space.txt");
	expect_listing("out s src");
}

/* A file whose object exists fails alone without -f: the old object stays
 * and the other files are imported; with -f it is replaced. */
Test(cli, import_name_collision_needs_force)
{
	char src[512], want_[1200], *want = want_;
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("old"), 3000, 1, true);
	put_file("a/one", P("old"));
	snprintf(src, sizeof(src), "%s", P("src"));
	cr_assert_eq(mkdir(src, 0755), 0);
	cr_assert_eq(mkdir(P("src/a"), 0755), 0);
	write_file(P("src/a/one"), 5000, 2, true);
	write_file(P("src/b"), 700, 3, false);
	write_file(P("src/c"), 900, 4, false);

	r = coil_run(NULL, "import", P("s"), src, NULL);
	snprintf(want, sizeof(want_),
		 "imported 2 files, 1600 bytes (logical) from %s\n", src);
	expect(r, 1, want, NULL);
	snprintf(want, sizeof(want_), "coil: import: object 'a/one' already "
		 "exists in store '%s' (--force replaces it)\n", P("s"));
	cr_expect_str_eq(r.err, want);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "a/one\nb\nc\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "a/one", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("old"), P("got")), "the old object is untouched");
	cli_run_free(&r);

	r = coil_run(NULL, "import", "-f", P("s"), src, NULL);
	snprintf(want, sizeof(want_),
		 "imported 3 files, 6600 bytes (logical) from %s\n", src);
	expect(r, 0, want, "");
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "a/one\nb\nc\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "a/one", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("src/a/one"), P("got")));
	cli_run_free(&r);
	expect_listing("got old s src");
}

/* Names that would leave DIR, or name no single file in it, are reported
 * and skipped; the rest is exported and the status is 1.  A link under
 * DIR is not followed out of it. */
Test(cli, export_refuses_names_that_escape)
{
	const char *bad[][2] = {
		{ "../evil", "a '..' component (it would be written outside "
			     "the directory)" },
		{ "d/../../evil2", "a '..' component (it would be written "
				   "outside the directory)" },
		{ "/abs", "an absolute name (it would be written outside the "
			  "directory)" },
		{ "e//f", "an empty component ('//' or a '/' at its end)" },
		{ "g/", "an empty component ('//' or a '/' at its end)" },
		{ "./h", "a '.' component" },
	};
	char out[512], want_[1200], *want = want_, errs[4096] = "";
	struct cli_run r;

	make_store("s", "16M", "zstd");
	write_file(P("one"), 2000, 1, true);
	write_file(P("two"), 3000, 2, false);
	for (size_t i = 0; i < 6; i++) {
		put_file(bad[i][0], P("one"));
		snprintf(errs + strlen(errs), sizeof(errs) - strlen(errs),
			 "coil: export: skipping object '%s': %s\n", bad[i][0],
			 bad[i][1]);
	}
	put_file("ok", P("one"));
	put_file("d/inner", P("two"));
	put_file("link/x", P("two"));
	snprintf(out, sizeof(out), "%s", P("out"));
	cr_assert_eq(mkdir(out, 0755), 0);
	cr_assert_eq(symlink("..", P("out/link")), 0);

	r = coil_run(NULL, "export", P("s"), out, NULL);
	snprintf(want, sizeof(want_), "exported 2 objects, 5000 bytes to %s\n",
		 out);
	expect(r, 1, want, NULL);
	/* In name order: "/abs" sorts first, "link/x" last. */
	cr_expect(strstr(r.err, "coil: export: skipping object '../evil': a '..' "
				"component (it would be written outside the "
				"directory)\n"), "%s", r.err);
	snprintf(want, sizeof(want_), "coil: export: cannot write '%s/link/x': "
		 "'%s/link' is a symbolic link (not followed)\n", out, out);
	cr_expect(strstr(r.err, want), "%s", r.err);
	for (size_t i = 0; i < 6; i++) {
		char line[512];

		snprintf(line, sizeof(line), "'%s': %s\n", bad[i][0], bad[i][1]);
		cr_expect(strstr(r.err, line), "%s: %s", bad[i][0], r.err);
	}
	cr_expect_eq(strlen(r.err), strlen(errs) + strlen(want), "%s", r.err);
	cli_run_free(&r);
	expect_tree(out, "d/ d/inner link ok");
	cr_expect(same_file(P("one"), P("out/ok")));
	cr_expect(same_file(P("two"), P("out/d/inner")));
	/* Nothing landed beside DIR or above it. */
	expect_listing("one out s two");
}

/* A file that does not fit (the store fills half way through it) fails
 * alone: no object of its name and no temporary object remain, and over
 * an existing object (-f) that object keeps its bytes; a path longer than
 * an object name is refused before anything is written. */
Test(cli, failed_import_leaves_no_object)
{
	char src[512], want_[1200], *want = want_, longdir[210], longname[300];
	struct cli_run r;

	make_store("s", "8M", "none");
	snprintf(src, sizeof(src), "%s", P("src"));
	cr_assert_eq(mkdir(src, 0755), 0);
	write_file(P("src/huge"), 16u << 20, 3, true);
	write_file(P("src/small"), 1000, 4, true);
	/* 200 + 1 + 55 = 256 bytes: one past COIL_NAME_MAX. */
	memset(longdir, 'd', 200);
	longdir[200] = 0;
	snprintf(longname, sizeof(longname), "src/%s", longdir);
	cr_assert_eq(mkdir(P(longname), 0755), 0);
	snprintf(longname, sizeof(longname), "src/%s/%055d", longdir, 0);
	write_file(P(longname), 10, 5, false);

	r = coil_run(NULL, "import", P("s"), src, NULL);
	snprintf(want, sizeof(want_),
		 "imported 1 files, 1000 bytes (logical) from %s\n", src);
	expect(r, 1, want, NULL);
	snprintf(want, sizeof(want_), "coil: import: writing object 'huge' to "
		 "store '%s': store is full\n", P("s"));
	cr_expect(strstr(r.err, want), "%s", r.err);
	snprintf(want, sizeof(want_), "coil: import: cannot import '%s/%s/%055d': "
		 "its name is 256 bytes, an object's is at most %d\n", src,
		 longdir, 0, COIL_NAME_MAX);
	cr_expect(strstr(r.err, want), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "small\n", "");
	cli_run_free(&r);

	/* Over an existing object: the temporary object is removed, the old
	 * object stays whole, and its space is still usable. */
	write_file(P("old"), 2000, 6, true);
	put_file("huge", P("old"));
	r = coil_run(NULL, "import", "--force", P("s"), src, NULL);
	snprintf(want, sizeof(want_),
		 "imported 1 files, 1000 bytes (logical) from %s\n", src);
	expect(r, 1, want, NULL);
	snprintf(want, sizeof(want_), "coil: import: writing object 'huge' to "
		 "store '%s': store is full\n", P("s"));
	cr_expect(strstr(r.err, want), "%s", r.err);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "huge\nsmall\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "huge", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("old"), P("got")), "the old object is untouched");
	cli_run_free(&r);
	put_file("after", P("old"));
	/* A DIR that is not one touches nothing. */
	r = coil_run(NULL, "import", P("s"), P("old"), NULL);
	snprintf(want, sizeof(want_), "coil: import: cannot read '%s': Not a "
		 "directory\n", P("old"));
	expect(r, 1, "", want);
	cli_run_free(&r);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "after\nhuge\nsmall\n", "");
	cli_run_free(&r);
	expect_listing("got old s src");
}

/* ---- progress ------------------------------------------------------------ */

/* No progress text when stderr is not a terminal; on a terminal, a line
 * once the operation has run for a second (stdin held open for 1.5 s). */
Test(cli, progress_only_on_a_terminal)
{
	struct cli_run r;
	int master, in[2], st;
	char buf[4096] = "";
	size_t got = 0;
	pid_t pid;

	make_store("s", "64M", "zstd");
	write_file(P("big"), 9u << 20, 2, false);
	r = coil_run(NULL, "put", P("s"), "quiet", P("big"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);

	cr_assert_eq(pipe(in), 0);
	pid = forkpty(&master, NULL, NULL, NULL);
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(in[0], 0);
		close(in[1]);
		execl(COIL_CLI_PATH, COIL_CLI_PATH, "put", P("s"), "slow", "-",
		      (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	{
		char *data = calloc(1, 1u << 20);
		cr_assert_eq(write(in[1], data, 1u << 20), 1 << 20);
		usleep(1500000);
		cr_assert_eq(write(in[1], data, 1u << 20), 1 << 20);
		free(data);
	}
	close(in[1]);
	for (;;) {
		struct pollfd pf = { .fd = master, .events = POLLIN };
		ssize_t n;
		if (poll(&pf, 1, 10000) <= 0)
			break;
		n = read(master, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	close(master);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, buf);
	cr_expect(strstr(buf, "\rslow: 1.") && strstr(buf, " MiB\033[K"),
		  "terminal got '%s'", buf);
	cr_expect(strstr(buf, "\r\033[K"), "the line is cleared at the end");
	expect_listing("big s");
}

/* Ctrl-C during a put (with @opt, or NULL) of the object 'partial' from a
 * pipe, once a megabyte went in: status 1 and "interrupted". */
static void interrupt_put(const char *opt)
{
	char errpath[600];
	int in[2], st;
	pid_t pid;

	snprintf(errpath, sizeof(errpath), "%s.err", dir);
	cr_assert_eq(pipe(in), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(in[0], 0);
		dup2(e, 2);
		close(in[1]);
		if (opt)
			execl(COIL_CLI_PATH, COIL_CLI_PATH, "put", opt, P("s"),
			      "partial", "-", (char *)NULL);
		else
			execl(COIL_CLI_PATH, COIL_CLI_PATH, "put", P("s"),
			      "partial", "-", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	{
		char *data = calloc(1, 1u << 20);
		cr_assert_eq(write(in[1], data, 1u << 20), 1 << 20);
		free(data);
	}
	usleep(500000); /* the temporary object holds a megabyte */
	kill(pid, SIGINT);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	close(in[1]);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	{
		char *err = cr_slurp(errpath, NULL);
		cr_expect_str_eq(err, "coil: put: interrupted; object 'partial' left "
				      "as it was\n");
		free(err);
	}
	unlink(errpath);
}

/* An interrupted put leaves no object: neither NAME nor the temporary one;
 * with --force over an existing object, that object is as it was. */
Test(cli, interrupted_put_leaves_the_name_as_it_was)
{
	struct cli_run r;

	make_store("s", "16M", "zstd");
	interrupt_put(NULL);
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	write_file(P("old"), 5000, 6, true);
	r = coil_run(NULL, "put", P("s"), "partial", P("old"), NULL);
	expect(r, 0, "", "");
	cli_run_free(&r);
	interrupt_put("--force");
	r = coil_run(NULL, "ls", P("s"), NULL);
	expect(r, 0, "partial\n", "");
	cli_run_free(&r);
	r = coil_run(NULL, "get", P("s"), "partial", P("got"), NULL);
	expect(r, 0, "", "");
	cr_expect(same_file(P("old"), P("got")), "the old object is untouched");
	cli_run_free(&r);
	expect_listing("got old s");
}
