/* tools/cli.h — what the files of the coil command-line tool share.
 *
 * The tool uses only include/coil.h.  Each command is a function
 * cmd_<name>(argc, argv) with argv[0] the command's name; it returns the
 * process exit status (CLI_OK, CLI_FAIL, CLI_USAGE, CLI_DAMAGED). */
#ifndef COIL_CLI_H
#define COIL_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coil.h"

/* Exit statuses, documented in docs/cli.md and `coil help`. */
#define CLI_OK      0 /* done */
#define CLI_FAIL    1 /* the operation failed (message on stderr) */
#define CLI_USAGE   2 /* bad command line */
#define CLI_DAMAGED 3 /* check: an object is damaged (data ranges);
		       * salvage: something could not be saved */
#define CLI_DAMAGED_META 4 /* check --deep, scrub: the store's own
			    * metadata or accounting is damaged, or the
			    * store does not open */

/* One copy buffer: large enough that a put or get is a few calls per
 * megabyte, small enough for any machine. */
#define CLI_BUF_BYTES (4u << 20)

/* Set by SIGINT / SIGTERM / SIGHUP; long loops stop and clean up. */
extern volatile sig_atomic_t cli_interrupted;

/* "coil: " + the formatted message + newline, on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A store-level error (-errno from coil) in words for the user. */
const char *cli_reason(int rc);

/* Open @path for the command @cmd ("ls", "put"...).  Falls back to
 * COIL_NO_DIRECT where the file system refuses O_DIRECT.  On failure the
 * message names the store and the cause, and the return is the negative
 * errno. */
int cli_open_store(const char *cmd, const char *path, unsigned flags,
		   coil_store **s);
/* Is @spec (NULL: none given) a codec coil_open accepts ("none", "zstd",
 * "zstd:1".."zstd:19")?  @return 0, or CLI_USAGE after saying what is
 * wrong with option @opt. */
int cli_codec_check(const char *opt, const char *spec);
/* cli_open_store with a codec for the data this open writes (NULL: the
 * library's default). */
int cli_open_store_codec(const char *cmd, const char *path, unsigned flags,
			 const char *codec, coil_store **s);
/* Close it; a failure is reported.  @return 0 or the negative errno. */
int cli_close_store(const char *path, coil_store *s);

/* Parse "4096", "64K", "64KiB", "2g" (powers of 1024).  @return 0 and
 * *@v, or -EINVAL (not a size) / -ERANGE (past 2^64). */
int cli_parse_size(const char *text, uint64_t *v);
/* "1.5 MiB": @buf of at least 32 bytes. */
const char *cli_human(uint64_t bytes, char *buf, size_t len);

/* A progress line on stderr, only when stderr is a terminal and only once
 * the operation has run for a second. */
struct cli_progress {
	const char *what;
	uint64_t total; /* 0 = unknown (stdin) */
	uint64_t start_ns, shown_ns;
	bool tty, shown;
	/* Commands that copy many files (import, export) count them too:
	 * "3/40 files, " before the bytes when @unit is set.  @base is the
	 * bytes of the copies already done, which each copy adds its own
	 * to. */
	const char *unit;
	uint64_t items, nitems, base;
};
void cli_progress_start(struct cli_progress *p, const char *what, uint64_t total);
void cli_progress_update(struct cli_progress *p, uint64_t done);
void cli_progress_end(struct cli_progress *p);

/* The command line of one command: options first or mixed with the
 * arguments, "--" ends them, "-" alone is an argument. */
struct cli_opt {
	const char *lng;   /* "--force" */
	char shrt;         /* 'f', or 0 */
	const char **arg;  /* where its value goes, or NULL for a flag */
	bool *flag;        /* set when present (flags) */
};
/* (--help and -h are seen by main before the command runs.)
 * @return 0 with the arguments in @pos (*@npos of them, at most @maxpos),
 * or CLI_USAGE after printing what is wrong. */
int cli_parse_args(const char *cmd, int argc, char **argv,
		   const struct cli_opt *opts, char **pos, int maxpos, int *npos);
/* Print "coil: CMD: expected ARGS" and the command's usage line. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The usage line of a command ("coil put [--force] STORE NAME FILE"). */
const char *cli_synopsis(const char *cmd);

/* Objects of a store, sorted by name (bytewise). */
struct cli_entry {
	char *name;
	size_t len;
	uint64_t size;
};
int cli_list_sorted(coil_store *s, struct cli_entry **out, size_t *n);
void cli_list_free(struct cli_entry *e, size_t n);

/* One copy between a file and an object, as put and get make it (cli_copy.c)
 * and import and export repeat it: the object or file appears whole under
 * its name or not at all.  Failures are reported, "CMD: ..." on stderr. */
struct cli_copy {
	const char *cmd;          /* "put", "import"...: for messages */
	const char *store;        /* the store's path: for messages */
	struct cli_progress *p;   /* the caller's line, or NULL for one of
				   * this copy's own (named after the object) */
	bool force;               /* put: replace an existing object */
	bool sync;                /* put: durable before returning (import
				   * syncs once, after its last file) */
	bool nofollow;            /* get: replace a symbolic link at the file
				   * instead of writing the file it names */
	/* Out: */
	uint64_t bytes;           /* copied, when the copy succeeded */
	bool local;               /* it failed on the file's side, not the
				   * store's */
};
/* Copy @fd (named @file in messages) into the object @name of @s, through
 * a temporary object renamed onto @name.  @return 0 or the negative errno. */
int cli_put_fd(coil_store *s, struct cli_copy *c, const char *name, int fd,
	       const char *file);
/* Copy the object @name of @s into @file ("-": stdout) through a temporary
 * file beside it, fsync'd and renamed over it.  @return 0 or -errno. */
int cli_get_object(coil_store *s, struct cli_copy *c, const char *name,
		   const char *file);

int cmd_create(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_mv(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_compact(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_scrub(int argc, char **argv);
int cmd_salvage(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
/* coil check --deep STORE (cli_scrub.c).  @return the exit status. */
int cli_check_deep(const char *path);

#endif
