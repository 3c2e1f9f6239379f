/* tests/cli_run.h — run the built coil tool (COIL_CLI_PATH) as a user
 * would, capturing its exit status, stdout and stderr; and the small file
 * helpers the damage tests share (flip a byte, read a file). */
#ifndef COIL_TEST_CLI_RUN_H
#define COIL_TEST_CLI_RUN_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/format.h"
#include "tests/super_util.h"

#ifndef COIL_CLI_PATH
#error "meson passes the path of the built coil tool"
#endif

struct cli_run {
	int status; /* exit status, or 128 + signal */
	char *out, *err;
};

/* The whole file at @path (NUL-terminated; *@len its length if wanted). */
static inline char *cr_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

/* Run coil with @argv (NULL-terminated, without the program); stdin from
 * @in (NULL: /dev/null); stdout and stderr kept in files next to @tag. */
static inline struct cli_run cli_runv(const char *tag, const char *in,
				      const char *const *args)
{
	char *argv[34], out[320], err[320];
	struct cli_run r;
	int n = 0, st;
	pid_t pid;

	argv[n++] = COIL_CLI_PATH;
	while (n < 33 && (argv[n] = (char *)args[n - 1]) != NULL)
		n++;
	argv[n] = NULL;
	snprintf(out, sizeof(out), "%.256s.out", tag);
	snprintf(err, sizeof(err), "%.256s.err", tag);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int i = open(in ? in : "/dev/null", O_RDONLY);
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (i < 0 || o < 0 || e < 0)
			_exit(127);
		dup2(i, 0);
		dup2(o, 1);
		dup2(e, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.out = cr_slurp(out, NULL);
	r.err = cr_slurp(err, NULL);
	unlink(out);
	unlink(err);
	return r;
}

/* cli_runv with the arguments as a NULL-terminated list. */
#define cli_run(tag, ...) \
	cli_runv((tag), NULL, (const char *const[]){ __VA_ARGS__ })

static inline void cli_run_free(struct cli_run *r)
{
	free(r->out);
	free(r->err);
}

/* XOR one byte of the file at @path. */
static inline void flip_byte(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0xa5;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

/* The newer valid superblock copy of the closed store at @path. */
static inline void read_super(const char *path, struct fmt_super *sb)
{
	*sb = et_newest_super(path);
}

#endif
