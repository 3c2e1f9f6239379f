/* test_sqlite.c — the coil VFS (sqlite/) driven through the stock sqlite3
 * shell, as a user would: `.load libcoil_sqlite`, then a database on
 * `vfs=coil`.  The scripted workload must give the same content as on the
 * default VFS in every journal mode, survive a reopen in a new process, a
 * kill -9 in the middle of a large transaction, and a second process must be
 * refused cleanly.  The store is inspected with coil's own API between
 * shell runs (journal and WAL objects really live in it).  Programs linking
 * the extension (coil_sqlite_register) are driven through dlopen: one
 * connection's send failing with another connection's writes in it. */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"

#ifndef COIL_SQLITE_EXT
#error "COIL_SQLITE_EXT: path of libcoil_sqlite.so (sqlite/meson.build)"
#endif

#define ROWS 10000           /* @N@ of tests/sqlite/workload.sql */
#define KILL_WAIT_NS (60ull * 1000000000ull)

struct scratch {
	char dir[PATH_MAX];
	char store[PATH_MAX + 16];
	int nrun;
};

/* Under ASan/UBSan (gcc's shared runtimes) the extension needs the same
 * runtimes first in the shell's link map: preload what this process has. */
static char g_preload[2048];

static int phdr_collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *base = strrchr(info->dlpi_name, '/');

	(void)size;
	(void)arg;
	base = base ? base + 1 : info->dlpi_name;
	if (!strncmp(base, "libasan.so", 10) || !strncmp(base, "libubsan.so", 11)) {
		size_t n = strlen(g_preload);

		snprintf(g_preload + n, sizeof(g_preload) - n, "%s%s",
			 n ? ":" : "", info->dlpi_name);
	}
	return 0;
}

static void scratch_init(struct scratch *s, const char *tag)
{
	char tmpl[PATH_MAX];

	g_preload[0] = '\0';
	dl_iterate_phdr(phdr_collect, NULL);
	mkdir("sqlite-scratch", 0755);
	snprintf(tmpl, sizeof(tmpl), "sqlite-scratch/%s-XXXXXX", tag);
	cr_assert_not_null(mkdtemp(tmpl), "mkdtemp: %s", strerror(errno));
	cr_assert_not_null(realpath(tmpl, s->dir));
	snprintf(s->store, sizeof(s->store), "%s/store.coil", s->dir);
	s->nrun = 0;
}

static void scratch_fini(struct scratch *s)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
	cr_assert_eq(system(cmd), 0);
}

static char *file_read(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void file_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "create %s: %s", path, strerror(errno));
	cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	cr_assert_eq(fclose(f), 0);
}

static int file_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* tests/sqlite/workload.sql with @N@ replaced by @rows. */
static char *workload_text(int rows)
{
	char path[PATH_MAX], num[32], *src, *out, *p, *q;
	size_t need;

	snprintf(path, sizeof(path), "%s/workload.sql", COIL_SQLITE_SRCDIR);
	src = file_read(path);
	snprintf(num, sizeof(num), "%d", rows);
	need = strlen(src) * 2 + 1;
	out = malloc(need);
	cr_assert_not_null(out);
	for (p = src, q = out; *p;) {
		if (!strncmp(p, "@N@", 3)) {
			q += sprintf(q, "%s", num);
			p += 3;
		} else {
			*q++ = *p++;
		}
	}
	*q = '\0';
	free(src);
	return out;
}

/* Start the shell on @script_path (or on a pipe when NULL, returned in
 * *@in_fd), stdout and stderr into @out_path, @env ("K=V", NULL-ended)
 * added to the environment. */
static pid_t shell_spawn(const char *script_path, const char *out_path,
			 char *const *env, int *in_fd)
{
	int pfd[2] = { -1, -1 };
	pid_t pid;

	if (!script_path)
		cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		int in, out;

		in = script_path ? open(script_path, O_RDONLY) : pfd[0];
		out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0)
			_exit(126);
		dup2(in, 0);
		dup2(out, 1);
		dup2(out, 2);
		if (pfd[1] >= 0)
			close(pfd[1]);
		unsetenv("COIL_STORE");
		unsetenv("COIL_SQLITE_DEFAULT");
		if (g_preload[0]) {
			setenv("LD_PRELOAD", g_preload, 1);
			setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
		}
		for (; env && *env; env++)
			putenv(*env);
		execl(COIL_SQLITE_SHELL, "sqlite3", "-batch", "-bail", (char *)NULL);
		_exit(127);
	}
	if (!script_path) {
		close(pfd[0]);
		*in_fd = pfd[1];
	}
	return pid;
}

/* Run @script in a new shell process; returns its output (malloc'd) and
 * its exit status in *@status. */
static char *shell_run(struct scratch *s, const char *script, char *const *env,
		       int *status)
{
	char in[PATH_MAX + 32], out[PATH_MAX + 32];
	pid_t pid;
	int wst;

	s->nrun++;
	snprintf(in, sizeof(in), "%s/run%d.sql", s->dir, s->nrun);
	snprintf(out, sizeof(out), "%s/run%d.out", s->dir, s->nrun);
	file_write(in, script);
	pid = shell_spawn(in, out, env, NULL);
	cr_assert_eq(waitpid(pid, &wst, 0), pid);
	*status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
	return file_read(out);
}

/* The lines that open the coil database "db.sqlite" in @s's store.  The
 * extension is loaded as a shell user loads it, by path without ".so" and
 * without an entry point: SQLite adds the suffix and derives
 * sqlite3_coilsqlite_init from the file name. */
static void coil_preamble(FILE *m, const struct scratch *s, const char *mode)
{
	size_t n = strlen(COIL_SQLITE_EXT);

	if (n > 3 && !strcmp(COIL_SQLITE_EXT + n - 3, ".so"))
		n -= 3;
	fprintf(m, ".load %.*s\n", (int)n, COIL_SQLITE_EXT);
	fprintf(m, ".open file:db.sqlite?vfs=coil&coil_store=%s\n", s->store);
	if (mode && !strcmp(mode, "wal"))
		fprintf(m, "PRAGMA locking_mode=EXCLUSIVE;\n");
}

/* Run the coil preamble and then @fmt's text in a shell with @env;
 * @return its output (the caller frees it), *@status its exit status. */
static char *coil_run(struct scratch *s, const char *mode, char *const *env,
		      int *status, const char *fmt, ...)
{
	char *script, *out;
	size_t len;
	va_list ap;
	FILE *m = open_memstream(&script, &len);

	cr_assert_not_null(m);
	coil_preamble(m, s, mode);
	va_start(ap, fmt);
	vfprintf(m, fmt, ap);
	va_end(ap);
	fclose(m);
	out = shell_run(s, script, env, status);
	free(script);
	return out;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Size of object @name in the store, -ENOENT when absent (the shell must
 * have exited: the store admits one process).  A relative @name is taken
 * from the working directory, as the VFS names objects (the shells run in
 * this process's directory). */
static int64_t store_obj_size(const struct scratch *s, const char *rel)
{
	struct coil_options o;
	coil_store *st;
	coil_obj *obj;
	char name[PATH_MAX + 64], cwd[PATH_MAX];
	uint64_t size = 0;
	int rc;

	if (rel[0] == '/') {
		snprintf(name, sizeof(name), "%s", rel);
	} else {
		cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
		snprintf(name, sizeof(name), "%s/%s", cwd, rel);
	}

	uint64_t t0 = now_ns();

	coil_options_init(&o);
	for (;;) {
		rc = coil_open(s->store, &o, &st);
		if (rc == -EINVAL && !(o.flags & COIL_NO_DIRECT)) {
			o.flags |= COIL_NO_DIRECT;
			continue;
		}
		/* After a kill -9 the store's flock lives until the kernel has
		 * torn down the dead process's io_uring (asynchronously). */
		if (rc != -EBUSY || now_ns() - t0 > 10000000000ull)
			break;
		usleep(5000);
	}
	if (now_ns() - t0 > 100000000ull)
		fprintf(stderr, "note: store busy for %llu ms after the shell exited\n",
			    (unsigned long long)((now_ns() - t0) / 1000000));
	cr_assert_eq(rc, 0, "coil_open %s: %s", s->store, coil_strerror(rc));
	rc = coil_obj_open(st, name, 0, &obj);
	if (rc == 0) {
		cr_assert_eq(coil_obj_size(obj, &size), 0);
		cr_assert_eq(coil_obj_close(obj), 0);
	}
	cr_assert_eq(coil_close(st), 0);
	return rc < 0 ? rc : (int64_t)size;
}

/* --- the workload, default VFS vs coil, per journal mode ---------------- */

/* The workload on the default VFS and on coil in journal mode @mode, with
 * @env for the coil run and @pragmas after its journal mode; both must
 * end with the same content, before and after a reopen. */
static void workload_compare_with(const char *mode, char *const *env,
				  const char *pragmas)
{
	struct scratch s;
	char *wl = workload_text(ROWS), *script, *out, *plain_dump, *coil_dump;
	char path[PATH_MAX + 32], dump_plain[PATH_MAX + 32];
	char dump_coil[PATH_MAX + 32], dump_reopen[PATH_MAX + 32];
	char want_mode[32];
	size_t len;
	FILE *m;
	int status;
	int64_t jsize;

	scratch_init(&s, mode);
	snprintf(dump_plain, sizeof(dump_plain), "%s/plain.dump", s.dir);
	snprintf(dump_coil, sizeof(dump_coil), "%s/coil.dump", s.dir);
	snprintf(dump_reopen, sizeof(dump_reopen), "%s/reopen.dump", s.dir);
	snprintf(want_mode, sizeof(want_mode), "\n%s\n", mode);

	/* 1. the default VFS, a plain file */
	m = open_memstream(&script, &len);
	snprintf(path, sizeof(path), "%s/plain.db", s.dir);
	fprintf(m, ".open %s\n%s.output %s\n.dump\n", path, wl, dump_plain);
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "default VFS run failed:\n%s", out);
	free(out);
	free(script);

	/* 2. the same on coil, in @mode */
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, mode);
	fprintf(m, "SELECT 'mode';\nPRAGMA journal_mode=%s;\n%s%s", mode,
		pragmas, wl);
	fprintf(m, ".output %s\n.dump\n", dump_coil);
	fclose(m);
	out = shell_run(&s, script, env, &status);
	cr_assert_eq(status, 0, "coil run failed:\n%s", out);
	cr_assert_not_null(strstr(out, want_mode),
			   "journal_mode %s not taken:\n%s", mode, out);
	cr_assert_not_null(strstr(out, "summary|"), "%s", out);
	free(out);
	free(script);

	plain_dump = file_read(dump_plain);
	coil_dump = file_read(dump_coil);
	cr_assert_gt(strlen(plain_dump), 100000u);
	cr_assert(strcmp(plain_dump, coil_dump) == 0,
		  "coil (%s) content differs from the default VFS", mode);
	free(coil_dump);

	/* 3. the database, its journal and WAL are objects of the store */
	cr_assert(!file_exists("db.sqlite"), "db.sqlite leaked onto the filesystem");
	cr_assert_gt(store_obj_size(&s, "db.sqlite"), 0);
	jsize = store_obj_size(&s, "db.sqlite-journal");
	if (!strcmp(mode, "delete") || !strcmp(mode, "memory") || !strcmp(mode, "wal"))
		cr_assert_eq(jsize, -ENOENT, "%s: journal left: %lld", mode, (long long)jsize);
	else if (!strcmp(mode, "truncate"))
		cr_assert_eq(jsize, 0, "truncate: journal size %lld", (long long)jsize);
	else
		cr_assert_gt(jsize, 0, "persist: journal size %lld", (long long)jsize);
	if (!strcmp(mode, "wal"))
		cr_assert_eq(store_obj_size(&s, "db.sqlite-wal"), -ENOENT,
			     "wal: WAL not removed at close");

	/* 4. reopen in a new process: intact, same content */
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, mode);
	fprintf(m, "PRAGMA integrity_check;\n.output %s\n.dump\n", dump_reopen);
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "reopen failed:\n%s", out);
	cr_assert_not_null(strstr(out, "ok"), "integrity_check:\n%s", out);
	coil_dump = file_read(dump_reopen);
	cr_assert(strcmp(plain_dump, coil_dump) == 0,
		  "coil (%s) content changed across a reopen", mode);
	free(out);
	free(script);
	free(coil_dump);
	free(plain_dump);
	free(wl);
	scratch_fini(&s);
}

/* ---- giving space back ---- */

/* The store file's allocated bytes (du). */
static uint64_t store_disk_bytes(const struct scratch *s)
{
	struct stat st;

	cr_assert_eq(stat(s->store, &st), 0, "%s: %s", s->store, strerror(errno));
	return (uint64_t)st.st_blocks * 512;
}

#define BIG_ROWS 20000 /* of 4000 random bytes: 80 MB the store must hold */

/* Run @sql on "db.sqlite" of @s's store; the shell's output. */
static char *coil_sql(struct scratch *s, const char *sql)
{
	char *script, *out;
	size_t len;
	FILE *m = open_memstream(&script, &len);
	int status;

	coil_preamble(m, s, NULL);
	fputs(sql, m);
	fclose(m);
	out = shell_run(s, script, NULL, &status);
	cr_assert_eq(status, 0, "shell failed:\n%s", out);
	free(script);
	return out;
}

static void fill_big(struct scratch *s)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB);\n"
		 "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 "
		 "FROM c WHERE x < %d)\n"
		 "INSERT INTO big SELECT x, randomblob(4000) FROM c;\n", BIG_ROWS);
	free(coil_sql(s, sql));
}

/* VACUUM after a large delete shrinks the database; as the default VFS's
 * file shrinks, the store gives the freed segments back when it closes
 * (without it the store keeps them for its next writes). */
Test(sqlite, vacuum_gives_space_back_at_close, .timeout = 120)
{
	struct scratch s;
	uint64_t full, after;
	char *out;

	scratch_init(&s, "vacuum");
	fill_big(&s);
	full = store_disk_bytes(&s);
	cr_assert_gt(full, 72ull << 20, "the store holds the rows: %llu",
		     (unsigned long long)full);
	free(coil_sql(&s, "DELETE FROM big WHERE id > 100;\nVACUUM;\n"));
	after = store_disk_bytes(&s);
	cr_log_info("store on disk: %llu MiB full, %llu MiB after VACUUM",
		    (unsigned long long)(full >> 20),
		    (unsigned long long)(after >> 20));
	cr_assert_lt(after + (32ull << 20), full,
		     "VACUUM gave nothing back: %llu -> %llu bytes",
		     (unsigned long long)full, (unsigned long long)after);
	out = coil_sql(&s, "PRAGMA integrity_check;\n"
			   "SELECT 'rows', count(*), sum(length(b)) FROM big;\n");
	cr_assert_not_null(strstr(out, "ok"), "%s", out);
	cr_assert_not_null(strstr(out, "rows|100|400000"), "%s", out);
	free(out);
	scratch_fini(&s);
}

/* PRAGMA coil_compact gives the free space back at once, and says how
 * much. */
Test(sqlite, pragma_coil_compact, .timeout = 120)
{
	struct scratch s;
	unsigned long long back = 0;
	char *out, *p;

	scratch_init(&s, "compact");
	fill_big(&s);
	out = coil_sql(&s, "DELETE FROM big WHERE id > 100;\nVACUUM;\n"
			   "SELECT 'back';\nPRAGMA coil_compact;\n"
			   "PRAGMA integrity_check;\n"
			   "SELECT 'rows', count(*) FROM big;\n");
	p = strstr(out, "back\n");
	cr_assert_not_null(p, "%s", out);
	cr_assert_eq(sscanf(p + 5, "%llu", &back), 1, "%s", out);
	cr_assert_gt(back, 16ull << 20, "gave back %llu bytes", back);
	cr_assert_not_null(strstr(out, "ok"), "%s", out);
	cr_assert_not_null(strstr(out, "rows|100"), "%s", out);
	free(out);
	scratch_fini(&s);
}

static void workload_compare(const char *mode)
{
	workload_compare_with(mode, NULL, "");
}

Test(sqlite, workload_delete) { workload_compare("delete"); }
Test(sqlite, workload_truncate) { workload_compare("truncate"); }
Test(sqlite, workload_persist) { workload_compare("persist"); }
Test(sqlite, workload_memory) { workload_compare("memory"); }
Test(sqlite, workload_wal_exclusive) { workload_compare("wal"); }

/* The counter @key of the PRAGMA coil_vfs_stats text in @out; fails the
 * test when it is missing. */
static unsigned long long vfs_stat(const char *out, const char *key)
{
	char pat[64];
	unsigned long long v = 0;
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(out, pat);
	cr_assert_not_null(p, "no %s in %s", key, out);
	cr_assert_eq(sscanf(p + strlen(pat), "%llu", &v), 1, "%s", out);
	return v;
}

/* The smallest window and a small chunk cache under a 20-page SQLite
 * cache: transactions spill the window again and again, so arenas are
 * sent by the sender thread while SQLite writes the other one and reads
 * pages back through the VFS (cache misses overlaid with the writes of
 * both arenas).  The spill count says the path ran. */
static void workload_spilling(const char *mode)
{
	static char wb_env[] = "COIL_SQLITE_WRITEBACK=256K";
	static char cache_env[] = "COIL_SQLITE_CACHE=256K";
	char *env[] = { wb_env, cache_env, NULL };
	struct scratch s;
	char *out;
	unsigned long long spills = 0;
	int status;

	workload_compare_with(mode, env, "PRAGMA cache_size=20;\n");

	/* the same settings on a transaction of its own, for the count */
	scratch_init(&s, mode);
	out = coil_run(&s, mode, env, &status,
		       "PRAGMA journal_mode=%s;\nPRAGMA cache_size=20;\n"
		       "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n"
		       "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1"
		       " FROM c WHERE x < 20000) INSERT INTO t(v)"
		       " SELECT printf('%%08d %%.200c', x, 'v') FROM c;\n"
		       "SELECT 'sum', sum(length(v)) FROM t;\n"
		       "PRAGMA coil_vfs_stats;\n", mode);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "sum|4180000"), "%s", out);
	spills = vfs_stat(out, "spills");
	cr_assert_gt(spills, 4, "%s", out);
	free(out);
	scratch_fini(&s);
}

/* A WAL transaction larger than SQLite's page cache writes the same
 * pages' frames again before it commits: the window writes them over its
 * own bytes in place (writes_in_place counts them) and the database
 * reads back whole, in the same process and after a reopen. */
Test(sqlite, wal_frames_written_again_in_place, .timeout = 120)
{
	struct scratch s;
	char *out;
	unsigned long long inplace = 0;
	int status;

	scratch_init(&s, "wal");
	out = coil_run(&s, "wal", NULL, &status,
		       "PRAGMA journal_mode=wal;\nPRAGMA cache_size=20;\n"
		       "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n"
		       "BEGIN;\n"
		       "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1"
		       " FROM c WHERE x < 3000) INSERT INTO t(v)"
		       " SELECT printf('%%08d %%.200c', x, 'v') FROM c;\n"
		       "UPDATE t SET v = v || 'y' WHERE id %% 3 = 0;\n"
		       "UPDATE t SET v = v || 'y' WHERE id %% 3 = 0;\n"
		       "UPDATE t SET v = v || 'y' WHERE id %% 3 = 0;\n"
		       "COMMIT;\n"
		       "SELECT 'sum', sum(length(v)) FROM t;\n"
		       "PRAGMA integrity_check;\n"
		       "PRAGMA coil_vfs_stats;\n");
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "sum|630000"), "%s", out);
	cr_assert_not_null(strstr(out, "\nok\n"), "%s", out);
	inplace = vfs_stat(out, "writes_in_place");
	cr_assert_gt(inplace, 0, "%s", out);
	free(out);
	out = coil_run(&s, "wal", NULL, &status,
		       "SELECT 'sum', sum(length(v)) FROM t;\n"
		       "PRAGMA integrity_check;\n");
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "sum|630000"), "%s", out);
	cr_assert_not_null(strstr(out, "\nok\n"), "%s", out);
	free(out);
	scratch_fini(&s);
}

Test(sqlite, workload_delete_spilling, .timeout = 120)
{
	workload_spilling("delete");
}

Test(sqlite, workload_wal_spilling, .timeout = 120)
{
	workload_spilling("wal");
}

/* --- kill -9 in the middle of a large transaction ----------------------- */

#define KILL_ROWS 3000

static void kill_mid_transaction(const char *mode)
{
	static char arena_env[] = "COIL_SQLITE_WRITEBACK=1M";
	char *small_arena[] = { arena_env, NULL };
	struct scratch s;
	char in[PATH_MAX + 32], out_path[PATH_MAX + 32], marker[PATH_MAX + 32];
	char want[128], *script, *out;
	size_t len;
	FILE *m;
	pid_t pid;
	uint64_t t0;
	int wst, status;
	int64_t size;

	scratch_init(&s, mode);
	snprintf(in, sizeof(in), "%s/kill.sql", s.dir);
	snprintf(out_path, sizeof(out_path), "%s/kill.out", s.dir);
	snprintf(marker, sizeof(marker), "%s/in-transaction", s.dir);

	/* A committed state, then a transaction that rewrites it and grows
	 * the table by ~16 MiB through a tiny page cache — far more than the
	 * VFS's write-back arena, shrunk to 1 MiB here, so journal records
	 * and pages (or WAL frames) reach the store before commit — then,
	 * still inside it, a marker file and a query that never ends.  The
	 * kill lands there. */
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, mode);
	/* synchronous=OFF: no xSync at all, so the committed state is in
	 * the store only because the VFS sends a transaction's writes when
	 * SQLite reports it committed (SQLITE_FCNTL_COMMIT_PHASETWO). */
	fprintf(m, "PRAGMA journal_mode=%s;\nPRAGMA cache_size=20;\n"
		   "PRAGMA synchronous=OFF;\n", mode);
	fprintf(m, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n"
		   "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 FROM c"
		   " WHERE x < %d) INSERT INTO t(v) SELECT printf('committed %%08d %%.100c', x, 'c') FROM c;\n",
		   KILL_ROWS);
	fprintf(m, "BEGIN;\n"
		   "UPDATE t SET v = 'uncommitted ' || v;\n"
		   "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 FROM c"
		   " WHERE x < 80000) INSERT INTO t(v) SELECT printf('new %%08d %%.200c', x, 'n') FROM c;\n"
		   ".shell touch %s\n"
		   "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 FROM c"
		   " WHERE x < 100000000000) SELECT count(*) FROM c;\n"
		   "COMMIT;\nSELECT 'finished';\n", marker);
	fclose(m);
	file_write(in, script);
	free(script);

	pid = shell_spawn(in, out_path, small_arena, NULL);
	t0 = now_ns();
	while (!file_exists(marker) && now_ns() - t0 < KILL_WAIT_NS) {
		if (waitpid(pid, &wst, WNOHANG) == pid) {
			out = file_read(out_path);
			cr_assert_fail("shell exited before the marker:\n%s", out);
		}
		usleep(2000);
	}
	cr_assert(file_exists(marker), "no marker after 60 s");
	usleep(20000);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &wst, 0), pid);
	cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
	out = file_read(out_path);
	cr_assert_null(strstr(out, "finished"), "transaction was not cut:\n%s", out);
	free(out);

	/* What the kill left: a hot journal, or uncommitted WAL frames. */
	size = store_obj_size(&s, !strcmp(mode, "wal") ? "db.sqlite-wal"
						       : "db.sqlite-journal");
	cr_assert_gt(size, 0, "%s: nothing in flight at the kill (%lld)", mode,
		     (long long)size);

	/* A new process sees the last committed state, intact. */
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, mode);
	fprintf(m, "PRAGMA integrity_check;\n"
		   "SELECT 'state', count(*), sum(v LIKE 'committed %%'), max(id) FROM t;\n");
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "reopen failed:\n%s", out);
	snprintf(want, sizeof(want), "ok\nstate|%d|%d|%d\n", KILL_ROWS, KILL_ROWS,
		 KILL_ROWS);
	cr_assert_not_null(strstr(out, want), "want %s got:\n%s", want, out);
	free(out);
	free(script);
	if (strcmp(mode, "wal"))
		cr_assert_eq(store_obj_size(&s, "db.sqlite-journal"), -ENOENT,
			     "hot journal not rolled back and removed");
	scratch_fini(&s);
}

Test(sqlite, kill9_rollback_journal) { kill_mid_transaction("delete"); }
Test(sqlite, kill9_wal_exclusive) { kill_mid_transaction("wal"); }

/* --- one process at a time ---------------------------------------------- */

Test(sqlite, second_process_refused)
{
	struct scratch s;
	char out_a[PATH_MAX + 32], marker[PATH_MAX + 32], *script, *out;
	size_t len;
	FILE *m;
	pid_t pid;
	uint64_t t0;
	int fd, wst, status;

	scratch_init(&s, "busy");
	snprintf(out_a, sizeof(out_a), "%s/a.out", s.dir);
	snprintf(marker, sizeof(marker), "%s/a-open", s.dir);

	/* A holds the store open, waiting on its stdin. */
	pid = shell_spawn(NULL, out_a, NULL, &fd);
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "CREATE TABLE t(x);\nINSERT INTO t VALUES (1), (2), (3);\n"
		   ".shell touch %s\n", marker);
	fclose(m);
	cr_assert_eq(write(fd, script, len), (ssize_t)len);
	free(script);
	t0 = now_ns();
	while (!file_exists(marker) && now_ns() - t0 < KILL_WAIT_NS)
		usleep(2000);
	cr_assert(file_exists(marker), "first shell never opened the store");

	/* B is refused with an error, not a crash or a hang. */
	m = open_memstream(&script, &len);
	fprintf(m, ".log stderr\n");
	coil_preamble(m, &s, NULL);
	fprintf(m, "SELECT 'count', count(*) FROM t;\n");
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_lt(status, 128, "second shell crashed (%d):\n%s", status, out);
	cr_assert_null(strstr(out, "count|3"), "second process got in:\n%s", out);
	cr_assert_not_null(strstr(out, "locked"), "no clean refusal:\n%s", out);
	/* ... and the log says why, naming the store */
	cr_assert_not_null(strstr(out, "in use by another process"), "%s", out);
	cr_assert_not_null(strstr(out, s.store), "%s", out);
	free(out);

	/* A is unharmed, and once it exits B gets in. */
	cr_assert_eq(write(fd, "SELECT 'a', count(*) FROM t;\n", 29), 29);
	close(fd);
	cr_assert_eq(waitpid(pid, &wst, 0), pid);
	cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	out = file_read(out_a);
	cr_assert_not_null(strstr(out, "a|3"), "%s", out);
	free(out);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "count|3"), "%s", out);
	free(out);
	free(script);
	scratch_fini(&s);
}

/* --- finding the store without a URI parameter --------------------------- */

Test(sqlite, store_from_environment)
{
	struct scratch s;
	char env_store[PATH_MAX + 32], *env[4], *out;
	char script[PATH_MAX * 2];
	int status;

	scratch_init(&s, "env");
	snprintf(env_store, sizeof(env_store), "COIL_STORE=%s", s.store);
	env[0] = env_store;
	env[1] = "COIL_STORE_SIZE=64M";
	env[2] = NULL;
	/* COIL_STORE names the store; vfs=coil still chooses the VFS. */
	snprintf(script, sizeof(script),
		 ".load %s\n.open file:envdb?vfs=coil\n"
		 "CREATE TABLE t(x);\nINSERT INTO t VALUES ('from-env');\n",
		 COIL_SQLITE_EXT);
	out = shell_run(&s, script, env, &status);
	cr_assert_eq(status, 0, "%s", out);
	free(out);
	cr_assert(file_exists(s.store), "COIL_STORE not created");
	cr_assert_gt(store_obj_size(&s, "envdb"), 0);

	/* COIL_SQLITE_DEFAULT=1 makes coil the default VFS: a plain name
	 * (no URI) lands in the store too. */
	env[2] = "COIL_SQLITE_DEFAULT=1";
	env[3] = NULL;
	snprintf(script, sizeof(script),
		 ".load %s\n.open ./envdb\nSELECT 'got', x FROM t;\n",
		 COIL_SQLITE_EXT);
	out = shell_run(&s, script, env, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "got|from-env"), "%s", out);
	cr_assert(!file_exists("envdb"));
	free(out);
	scratch_fini(&s);
}

/* A missing store without COIL_STORE is an error SQLite reports, not a
 * crash. */
Test(sqlite, no_store_is_an_error)
{
	struct scratch s;
	char script[PATH_MAX * 2], *out;
	int status;

	scratch_init(&s, "nostore");
	snprintf(script, sizeof(script),
		 ".log stderr\n.load %s\n.open file:nodb?vfs=coil\n"
		 "CREATE TABLE t(x);\nSELECT 'created';\n", COIL_SQLITE_EXT);
	out = shell_run(&s, script, NULL, &status);
	/* The shell then carries on with a substitute in-memory database. */
	cr_assert_lt(status, 128, "crashed:\n%s", out);
	cr_assert_not_null(strstr(out, "unable to open database \"file:nodb"),
			   "%s", out);
	/* SQLite's message is only its code's; the reason goes to the log */
	cr_assert_not_null(strstr(out, "COIL_STORE is not set"), "%s", out);
	cr_assert(!file_exists(s.store));
	free(out);
	scratch_fini(&s);
}

/* --- several connections of one process ---------------------------------- */

/* Two connections in one shell (.connection): in WAL mode without
 * EXCLUSIVE (the WAL index on the heap), a reader keeps its snapshot while
 * the other connection commits; a second writer is refused with BUSY. */
static void two_connections(const char *mode)
{
	struct scratch s;
	char *script, *out;
	size_t len;
	FILE *m;
	int status;

	scratch_init(&s, mode);
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "PRAGMA journal_mode=%s;\n"
		   "CREATE TABLE t(x);\nINSERT INTO t VALUES (1);\n"
		   ".connection 1\n", mode);
	coil_preamble(m, &s, NULL);
	fprintf(m, "SELECT 'c1', count(*) FROM t;\n");
	if (!strcmp(mode, "wal"))
		fprintf(m, "BEGIN;\nSELECT 'snap0', count(*) FROM t;\n"
			   ".connection 0\nINSERT INTO t VALUES (2);\n"
			   ".connection 1\nSELECT 'snap1', count(*) FROM t;\n"
			   "COMMIT;\n");
	else
		fprintf(m, ".connection 0\nINSERT INTO t VALUES (2);\n"
			   ".connection 1\n");
	fprintf(m, "SELECT 'c1 after', count(*) FROM t;\n"
		   "BEGIN IMMEDIATE;\nINSERT INTO t VALUES (3);\n"
		   ".connection 0\nSELECT 'c0 reads', count(*) FROM t;\n"
		   "INSERT INTO t VALUES (4);\nSELECT 'not reached';\n");
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_lt(status, 128, "crashed:\n%s", out);
	cr_assert_not_null(strstr(out, "c1|1\n"), "%s", out);
	if (!strcmp(mode, "wal")) {
		cr_assert_not_null(strstr(out, "snap0|1\nsnap1|1\n"),
				   "snapshot not kept:\n%s", out);
	}
	cr_assert_not_null(strstr(out, "c1 after|2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "c0 reads|2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "database is locked"), "%s", out);
	cr_assert_null(strstr(out, "not reached"), "%s", out);
	free(out);
	free(script);
	scratch_fini(&s);
}

Test(sqlite, two_connections_wal) { two_connections("wal"); }
Test(sqlite, two_connections_rollback) { two_connections("delete"); }

/* The same database name open in two stores (each store is its own namespace):
 * SQLite's xAccess and xDelete of a journal carry no store, and must reach
 * the journal's own store, not whichever store was opened last. */
Test(sqlite, same_name_in_two_stores)
{
	struct scratch s;
	char other[PATH_MAX + 16], *script, *out;
	size_t len;
	FILE *m;
	int status;

	scratch_init(&s, "two-stores");
	snprintf(other, sizeof(other), "%s/other.coil", s.dir);
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "CREATE TABLE t(x);\nINSERT INTO t VALUES (1);\n"
		   "ATTACH 'file:db.sqlite?vfs=coil&coil_store=%s' AS y;\n"
		   "CREATE TABLE y.u(x);\nINSERT INTO y.u VALUES (10);\n"
		   "INSERT INTO main.t VALUES (2);\n"
		   "INSERT INTO y.u VALUES (20);\n"
		   "SELECT 'main', count(*) FROM main.t;\n"
		   "SELECT 'y', count(*) FROM y.u;\n", other);
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "main|2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "y|2\n"), "%s", out);
	free(out);
	free(script);
	/* a new process sees both committed, and no journal left behind */
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "SELECT 'again', count(*) FROM t;\n");
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "again|2\n"), "%s", out);
	cr_assert_lt(store_obj_size(&s, "db.sqlite-journal"), 1, "journal left");
	free(out);
	free(script);
	scratch_fini(&s);
}

/* --- the C entry point: a program linking both libraries ------------------ */

/* The program side of coil_sqlite_register(): libsqlite3 and the extension
 * reached through dlopen, since this test binary links neither (it carries
 * coil's internal archive, and one process must not hold two copies of a
 * store).  The names mirror sqlite3.h. */
typedef struct sqlite3 sqlite3;
typedef int (*exec_cb)(void *, int, char **, char **);

static int count_cb(void *arg, int n, char **vals, char **names)
{
	(void)names;
	if (n == 1 && vals[0])
		*(long *)arg = strtol(vals[0], NULL, 10);
	return 0;
}

struct capi {
	void *lib, *ext;
	int (*reg)(const char *, int);
	int (*open_v2)(const char *, sqlite3 **, int, const char *);
	int (*exec)(sqlite3 *, const char *, exec_cb, void *, char **);
	int (*close_db)(sqlite3 *);
	struct sqlite3_vfs_head *(*vfs_find)(const char *);
};

/* struct sqlite3_vfs (sqlite3.h) up to its last iVersion 1 field, stable
 * since 3.5; only the members called here are typed. */
struct sqlite3_vfs_head {
	int iVersion, szOsFile, mxPathname;
	void *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(void);
	int (*xDelete)(struct sqlite3_vfs_head *, const char *, int);
	int (*xAccess)(void);
	int (*xFullPathname)(struct sqlite3_vfs_head *, const char *, int, char *);
	void (*xDlOpen)(void), (*xDlError)(void), (*xDlSym)(void), (*xDlClose)(void);
	int (*xRandomness)(void), (*xSleep)(void), (*xCurrentTime)(void);
	int (*xGetLastError)(struct sqlite3_vfs_head *, int, char *);
};

static void capi_load(struct capi *c)
{
	c->lib = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_GLOBAL);
	cr_assert_not_null(c->lib, "%s", dlerror());
	c->ext = dlopen(COIL_SQLITE_EXT, RTLD_NOW | RTLD_LOCAL);
	cr_assert_not_null(c->ext, "%s", dlerror());
	*(void **)&c->reg = dlsym(c->ext, "coil_sqlite_register");
	*(void **)&c->open_v2 = dlsym(c->lib, "sqlite3_open_v2");
	*(void **)&c->exec = dlsym(c->lib, "sqlite3_exec");
	*(void **)&c->close_db = dlsym(c->lib, "sqlite3_close");
	*(void **)&c->vfs_find = dlsym(c->lib, "sqlite3_vfs_find");
	cr_assert(c->reg && c->open_v2 && c->exec && c->close_db && c->vfs_find);
}

static int text_cb(void *arg, int n, char **vals, char **names)
{
	(void)names;
	if (n == 1 && vals[0])
		snprintf(arg, 1024, "%s", vals[0]);
	return 0;
}

static long long json_num(const char *js, const char *key)
{
	char pat[96];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(js, pat);
	cr_assert_not_null(p, "no %s in %s", key, js);
	return strtoll(p + strlen(pat), NULL, 10);
}

static sqlite3 *capi_open(struct capi *c, const char *name, const char *setup)
{
	sqlite3 *db = NULL;

	/* SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE */
	cr_assert_eq(c->open_v2(name, &db, 0x2 | 0x4, NULL), 0, "open %s", name);
	cr_assert_eq(c->exec(db, setup, NULL, NULL, NULL), 0, "%s: %s", name,
		     setup);
	return db;
}

Test(sqlite, c_api_register)
{
	struct scratch s;
	struct capi c;
	sqlite3 *db;
	long count = -1;
	int pass;

	scratch_init(&s, "capi");
	capi_load(&c);
	/* make_default = 1: the plain name below needs no vfs argument. */
	cr_assert_eq(c.reg(s.store, 1), 0);
	for (pass = 0; pass < 2; pass++) {
		db = capi_open(&c, "capi.db", pass == 0 ?
			       "CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);" :
			       "SELECT 1;");
		cr_assert_eq(c.exec(db, "SELECT count(*) FROM t;", count_cb,
				    &count, NULL), 0);
		cr_assert_eq(count, 2);
		cr_assert_eq(c.close_db(db), 0);
	}
	cr_assert(!file_exists("capi.db"));
	cr_assert_gt(store_obj_size(&s, "capi.db"), 0);
	scratch_fini(&s);
}

/* Every spelling of one path reaches one database, as on the default VFS:
 * a name is made absolute from the working directory and ".", ".." and
 * repeated slashes are resolved (a second connection that named the
 * database through "sub/.." used to open a different, empty object). */
Test(sqlite, one_name_per_database)
{
	static const char *const spellings[] = {
		"./names.db", "sub/../names.db", "./a/.//b/../../names.db",
		"a/b/c/../../..//names.db",
	};
	struct scratch s;
	struct capi c;
	struct sqlite3_vfs_head *vfs;
	char cwd[PATH_MAX], want[PATH_MAX + 16], full[PATH_MAX + 64];
	char abs_name[PATH_MAX + 16];
	sqlite3 *db, *other;
	long count = -1;
	size_t i;

	scratch_init(&s, "names");
	capi_load(&c);
	cr_assert_eq(c.reg(s.store, 1), 0);
	vfs = c.vfs_find("coil");
	cr_assert_not_null(vfs);
	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "%s/names.db", cwd);
	for (i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
		cr_assert_eq(vfs->xFullPathname(vfs, spellings[i], sizeof(full),
						full), 0);
		cr_assert_str_eq(full, want, "%s", spellings[i]);
	}
	cr_assert_eq(vfs->xFullPathname(vfs, "/x/../../y//./z/..", sizeof(full),
					full), 0);
	cr_assert_str_eq(full, "/y");

	db = capi_open(&c, "names.db", "CREATE TABLE t(x);"
		       "INSERT INTO t VALUES (1), (2), (3);");
	for (i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
		count = -1;
		other = capi_open(&c, spellings[i], "SELECT 1;");
		cr_assert_eq(c.exec(other, "SELECT count(*) FROM t;", count_cb,
				    &count, NULL), 0, "%s", spellings[i]);
		cr_assert_eq(count, 3, "%s", spellings[i]);
		cr_assert_eq(c.close_db(other), 0);
	}
	snprintf(abs_name, sizeof(abs_name), "%s/names.db", cwd);
	other = capi_open(&c, abs_name, "INSERT INTO t VALUES (4);");
	cr_assert_eq(c.close_db(other), 0);
	cr_assert_eq(c.exec(db, "SELECT count(*) FROM t;", count_cb, &count,
			    NULL), 0);
	cr_assert_eq(count, 4);
	cr_assert_eq(c.close_db(db), 0);
	cr_assert_gt(store_obj_size(&s, want), 0);
	scratch_fini(&s);
}

/* SQLite's message for a failed open is only its code's ("unable to open
 * database file"); the VFS's xGetLastError gives coil's reason. */
Test(sqlite, last_error_says_why)
{
	struct capi c;
	struct sqlite3_vfs_head *vfs;
	sqlite3 *db = NULL;
	char msg[512] = "";

	unsetenv("COIL_STORE");
	capi_load(&c);
	cr_assert_eq(c.reg(NULL, 1), 0);
	/* SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE: SQLITE_CANTOPEN */
	cr_assert_eq(c.open_v2("nostore.db", &db, 0x2 | 0x4, NULL), 14);
	c.close_db(db);
	vfs = c.vfs_find("coil");
	cr_assert_not_null(vfs);
	cr_assert_eq(vfs->xGetLastError(vfs, sizeof(msg), msg), ENOENT);
	cr_assert_not_null(strstr(msg, "COIL_STORE is not set"), "%s", msg);
	cr_assert_not_null(strstr(msg, "nostore.db"), "%s", msg);
	cr_assert(!file_exists("nostore.db"));
}

/* Two connections of one program share the store's write-back window, so
 * one connection's send can carry (and lose) another's writes.  Here the
 * store is full when connection b's commit sends the window, which also
 * holds the WAL frames a's open transaction spilled (cache_size 5): b's
 * commit fails, and a's frames never reached coil.  Space then comes back
 * (the filler database is deleted), so a's own commit could succeed on its
 * remaining writes; it must fail instead (the object remembers the loss:
 * vnode.wb_err), and a's table must read as before the transaction. */
/* Fill the store with f.db until nothing more fits.  The filler writes
 * its pages in place (no journal): nothing it wrote turns dead for the
 * cleaner to give back. */
static void fill_store(struct capi *c)
{
	sqlite3 *f = capi_open(c, "f.db", "PRAGMA journal_mode=OFF;"
			       "PRAGMA synchronous=OFF; CREATE TABLE t(x);");
	int rc = 0, i;

	/* 1 MiB commits until one does not fit, then single pages until
	 * none does */
	for (i = 0; i < 200 && rc == 0; i++)
		rc = c->exec(f, "INSERT INTO t SELECT randomblob(65000) FROM "
				"(WITH RECURSIVE n(k) AS (VALUES(1) UNION ALL "
				"SELECT k + 1 FROM n WHERE k < 16) SELECT k FROM n);",
			     NULL, NULL, NULL);
	cr_assert_eq(rc, 13 /* SQLITE_FULL */, "filler stopped with %d", rc);
	for (i = 0, rc = 0; i < 4000 && rc == 0; i++)
		rc = c->exec(f, "INSERT INTO t VALUES (randomblob(3000));",
			     NULL, NULL, NULL);
	cr_assert_eq(rc, 13 /* SQLITE_FULL */, "filler stopped with %d", rc);
	cr_assert_eq(c->close_db(f), 0);
}

/* Give the filler's space back. */
static void unfill_store(struct capi *c)
{
	struct sqlite3_vfs_head *vfs = c->vfs_find("coil");
	char full[PATH_MAX + 64];

	cr_assert_not_null(vfs);
	cr_assert_eq(vfs->xFullPathname(vfs, "f.db", sizeof(full), full), 0);
	cr_assert_eq(vfs->xDelete(vfs, full, 0), 0);
}

Test(sqlite, lost_writes_of_one_connection_fail_its_commit, .timeout = 120)
{
	struct scratch s;
	struct capi c;
	sqlite3 *a, *b;
	char js[1024] = "";
	long count = -1;
	int rc = 0;

	scratch_init(&s, "wberr");
	setenv("COIL_STORE_SIZE", "64M", 1);
	setenv("COIL_COMPRESSION", "none", 1);
	capi_load(&c);
	cr_assert_eq(c.reg(s.store, 1), 0);
	a = capi_open(&c, "a.db", "PRAGMA journal_mode=WAL;"
		      "PRAGMA synchronous=OFF; CREATE TABLE t(x);"
		      "INSERT INTO t VALUES (1);");
	b = capi_open(&c, "b.db", "PRAGMA journal_mode=WAL;"
		      "PRAGMA synchronous=OFF; CREATE TABLE t(x);");
	fill_store(&c);

	/* a's transaction spills WAL frames into the window */
	cr_assert_eq(c.exec(a, "PRAGMA cache_size=5; BEGIN;"
			       "INSERT INTO t SELECT randomblob(3000) FROM "
			       "(WITH RECURSIVE n(k) AS (VALUES(1) UNION ALL "
			       "SELECT k + 1 FROM n WHERE k < 400) SELECT k FROM n);",
			 NULL, NULL, NULL), 0);
	/* ... and they are still in the window, not in coil */
	cr_assert_eq(c.exec(a, "PRAGMA coil_vfs_stats;", text_cb, js, NULL), 0);
	cr_assert_gt(json_num(js, "sqlite_write_bytes_db") +
			     json_num(js, "sqlite_write_bytes_journal"),
		     json_num(js, "coil_write_bytes"), "%s", js);
	/* b's commit sends the window: the store is full */
	rc = c.exec(b, "INSERT INTO t VALUES (1);", NULL, NULL, NULL);
	cr_assert_neq(rc, 0, "b's commit found room for everything");

	/* room again */
	unfill_store(&c);

	rc = c.exec(a, "COMMIT;", NULL, NULL, NULL);
	cr_assert_neq(rc, 0, "a's commit succeeded after its spilled writes "
			     "were lost in b's send");
	c.exec(a, "ROLLBACK;", NULL, NULL, NULL);
	cr_assert_eq(c.close_db(a), 0);
	cr_assert_eq(c.close_db(b), 0);

	a = capi_open(&c, "a.db", "PRAGMA integrity_check;");
	cr_assert_eq(c.exec(a, "SELECT count(*) FROM t;", count_cb, &count,
			    NULL), 0);
	cr_assert_eq(count, 1, "a holds %ld rows", count);
	cr_assert_eq(c.close_db(a), 0);
	scratch_fini(&s);
}

/* A spill that fails in the background (the store is full) fails the
 * transaction that spilled — a later write of it or its commit, even when
 * space has returned by then — and no later send goes out after it: the
 * database keeps its committed rows and takes new transactions. */
Test(sqlite, failed_spill_fails_its_transaction, .timeout = 120)
{
	struct scratch s;
	struct capi c;
	sqlite3 *a;
	char js[1024] = "";
	long count = -1;
	int rc, rc_commit;

	scratch_init(&s, "spillerr");
	setenv("COIL_STORE_SIZE", "64M", 1);
	setenv("COIL_COMPRESSION", "none", 1);
	setenv("COIL_SQLITE_WRITEBACK", "256K", 1);
	capi_load(&c);
	cr_assert_eq(c.reg(s.store, 1), 0);
	a = capi_open(&c, "a.db", "CREATE TABLE t(x);"
		      "INSERT INTO t VALUES (1);");
	fill_store(&c);

	/* 4 MiB of rows through a 5-page cache and a 256 KiB window */
	rc = c.exec(a, "PRAGMA cache_size=5; BEGIN;"
		       "INSERT INTO t SELECT randomblob(3000) FROM "
		       "(WITH RECURSIVE n(k) AS (VALUES(1) UNION ALL "
		       "SELECT k + 1 FROM n WHERE k < 1400) SELECT k FROM n);",
		    NULL, NULL, NULL);
	cr_assert_eq(c.exec(a, "PRAGMA coil_vfs_stats;", text_cb, js, NULL), 0);
	cr_assert_gt(json_num(js, "spills"), 0, "%s", js);
	/* room again before the commit: its own sends would succeed */
	unfill_store(&c);
	rc_commit = c.exec(a, "COMMIT;", NULL, NULL, NULL);
	cr_assert(rc != 0 || rc_commit != 0,
		  "a transaction whose spills found no room committed");
	c.exec(a, "ROLLBACK;", NULL, NULL, NULL);
	cr_assert_eq(c.close_db(a), 0);

	a = capi_open(&c, "a.db", "PRAGMA integrity_check;");
	cr_assert_eq(c.exec(a, "SELECT count(*) FROM t;", count_cb, &count,
			    NULL), 0);
	cr_assert_eq(count, 1, "a holds %ld rows", count);
	cr_assert_eq(c.exec(a, "INSERT INTO t VALUES (2);", NULL, NULL, NULL),
		     0);
	cr_assert_eq(c.close_db(a), 0);
	unsetenv("COIL_SQLITE_WRITEBACK");
	scratch_fini(&s);
}

/* A transaction SQLite reported committed survives kill -9 with no xSync
 * at all (WAL, synchronous=OFF): the VFS sends its writes at commit
 * (SQLITE_FCNTL_COMMIT_PHASETWO) instead of holding them in the write-back
 * window, as the default VFS's writes sit in the page cache. */
Test(sqlite, kill9_after_commit_without_sync)
{
	struct scratch s;
	char in[PATH_MAX + 32], out_path[PATH_MAX + 32], marker[PATH_MAX + 32];
	char *script, *out;
	size_t len;
	FILE *m;
	pid_t pid;
	uint64_t t0;
	int wst, status;

	scratch_init(&s, "commit");
	snprintf(in, sizeof(in), "%s/commit.sql", s.dir);
	snprintf(out_path, sizeof(out_path), "%s/commit.out", s.dir);
	snprintf(marker, sizeof(marker), "%s/committed", s.dir);
	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "PRAGMA journal_mode=wal;\nPRAGMA synchronous=OFF;\n"
		   "CREATE TABLE t(x);\n"
		   "INSERT INTO t VALUES (1), (2), (3);\n"
		   "INSERT INTO t VALUES (4);\n"
		   ".shell touch %s\n"
		   "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 FROM c"
		   " WHERE x < 100000000000) SELECT count(*) FROM c;\n", marker);
	fclose(m);
	file_write(in, script);
	free(script);
	pid = shell_spawn(in, out_path, NULL, NULL);
	t0 = now_ns();
	while (!file_exists(marker) && now_ns() - t0 < KILL_WAIT_NS)
		usleep(2000);
	cr_assert(file_exists(marker), "no marker after 60 s");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &wst, 0), pid);
	cr_assert_gt(store_obj_size(&s, "db.sqlite-wal"), 0);

	m = open_memstream(&script, &len);
	coil_preamble(m, &s, NULL);
	fprintf(m, "PRAGMA integrity_check;\nSELECT 'rows', count(*), sum(x) FROM t;\n");
	fclose(m);
	out = shell_run(&s, script, NULL, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "ok\nrows|4|10\n"), "lost a commit:\n%s", out);
	free(out);
	free(script);
	scratch_fini(&s);
}
