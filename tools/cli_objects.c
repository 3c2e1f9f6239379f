/* tools/cli_objects.c — coil ls, rm, mv, compact and check: commands over
 * the objects by name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

/* ls -l: each object's size and stored bytes, from one open of each.  An
 * object removed since the listing is not an error of the store: it is
 * shown as empty. */
static int stat_all(coil_store *s, const char *store, const struct cli_entry *e,
		    size_t n, struct coil_obj_info **out)
{
	struct coil_obj_info *info = calloc(n ? n : 1, sizeof(*info));
	int rc = 0;

	if (!info) {
		cli_err("ls: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		coil_obj *o;

		rc = coil_obj_open(s, e[i].name, 0, &o);
		if (rc == -ENOENT) {
			rc = 0;
			continue;
		}
		if (rc == 0) {
			rc = coil_obj_stat(o, &info[i]);
			coil_obj_close(o);
		}
		if (rc < 0)
			cli_err("ls '%s': object '%s': %s", store, e[i].name,
				cli_reason(rc));
	}
	if (rc < 0) {
		free(info);
		return rc;
	}
	*out = info;
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	bool lng = false;
	const struct cli_opt opts[] = { { "--long", 'l', NULL, &lng }, { 0 } };
	struct cli_entry *e = NULL;
	struct coil_obj_info *info = NULL;
	char *pos[1];
	coil_store *s;
	size_t n = 0;
	int npos, rc, ret = CLI_OK, width = 1;

	rc = cli_parse_args("ls", argc, argv, opts, pos, 1, &npos);
	if (rc)
		return rc;
	if (npos != 1)
		return cli_usage_error("ls", "expected STORE");
	if (cli_open_store("ls", pos[0], COIL_RDONLY, &s) < 0)
		return CLI_FAIL;
	rc = cli_list_sorted(s, &e, &n);
	if (rc < 0) {
		cli_err("ls '%s': %s", pos[0], cli_reason(rc));
		ret = CLI_FAIL;
	}
	if (lng && ret == CLI_OK && stat_all(s, pos[0], e, n, &info) < 0)
		ret = CLI_FAIL;
	for (size_t i = 0; lng && info && i < n; i++) {
		int w = snprintf(NULL, 0, "%llu", (unsigned long long)info[i].size);
		if (w > width)
			width = w;
	}
	for (size_t i = 0; ret == CLI_OK && i < n; i++) {
		if (lng)
			printf("%*llu  %*llu  ", width,
			       (unsigned long long)info[i].size, width,
			       (unsigned long long)info[i].stored);
		fwrite(e[i].name, 1, e[i].len, stdout);
		putchar('\n');
	}
	free(info);
	cli_list_free(e, n);
	if (fflush(stdout) != 0) {
		cli_err("ls: writing the list: %s", strerror(errno));
		ret = CLI_FAIL;
	}
	if (cli_close_store(pos[0], s) < 0)
		ret = CLI_FAIL;
	return ret;
}

int cmd_rm(int argc, char **argv)
{
	char **pos = calloc((size_t)argc, sizeof(*pos));
	coil_store *s;
	int npos, rc, ret = CLI_OK;

	if (!pos) {
		cli_err("rm: out of memory");
		return CLI_FAIL;
	}
	rc = cli_parse_args("rm", argc, argv, NULL, pos, argc, &npos);
	if (rc == 0 && npos < 2)
		rc = cli_usage_error("rm", "expected STORE NAME...");
	if (rc) {
		free(pos);
		return rc;
	}
	if (cli_open_store("rm", pos[0], 0, &s) < 0) {
		free(pos);
		return CLI_FAIL;
	}
	for (int i = 1; i < npos; i++) {
		rc = coil_obj_remove(s, pos[i]);
		if (rc == -ENOENT)
			cli_err("rm: no object '%s' in store '%s'", pos[i], pos[0]);
		else if (rc == -ENAMETOOLONG)
			cli_err("rm: object name '%.40s...' is too long (at most "
				"%d bytes)", pos[i], COIL_NAME_MAX);
		else if (rc < 0)
			cli_err("rm '%s': %s", pos[i], cli_reason(rc));
		if (rc < 0)
			ret = CLI_FAIL;
	}
	rc = coil_sync(s);
	if (rc < 0) {
		cli_err("rm: sync '%s': %s", pos[0], cli_reason(rc));
		ret = CLI_FAIL;
	}
	if (cli_close_store(pos[0], s) < 0)
		ret = CLI_FAIL;
	free(pos);
	return ret;
}

/* ---- mv ---------------------------------------------------------------- */

/* What is wrong with @name, or NULL: checked here so that the message can
 * say which of the two names is at fault. */
static const char *mv_name_problem(const char *name)
{
	if (!name[0])
		return "is empty";
	if (strlen(name) > COIL_NAME_MAX)
		return "is too long (at most 255 bytes)";
	return NULL;
}

int cmd_mv(int argc, char **argv)
{
	bool keep = false;
	const struct cli_opt opts[] = {
		{ "--no-clobber", 'n', NULL, &keep },
		{ 0 },
	};
	const char *store, *old, *new_name, *why;
	char *pos[3];
	coil_store *s;
	int npos, rc, ret = CLI_FAIL;

	rc = cli_parse_args("mv", argc, argv, opts, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error("mv", "expected STORE OLD NEW");
	store = pos[0];
	old = pos[1];
	new_name = pos[2];
	for (int i = 1; i < 3; i++) {
		why = mv_name_problem(pos[i]);
		if (why) {
			cli_err("mv: object name '%.40s%s' %s", pos[i],
				strlen(pos[i]) > 40 ? "..." : "", why);
			return CLI_FAIL;
		}
	}
	if (cli_open_store("mv", store, 0, &s) < 0)
		return CLI_FAIL;
	rc = coil_obj_rename(s, old, new_name, keep ? COIL_RENAME_NOREPLACE : 0);
	if (rc == 0)
		rc = coil_sync(s); /* durable before exit, as put and rm */
	if (rc == 0)
		ret = CLI_OK;
	else if (rc == -ENOENT)
		cli_err("mv: no object '%s' in store '%s'", old, store);
	else if (rc == -EEXIST)
		cli_err("mv: object '%s' already exists in store '%s' "
			"(--no-clobber: nothing renamed)", new_name, store);
	else
		cli_err("mv '%s' to '%s' in store '%s': %s", old, new_name, store,
			cli_reason(rc));
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	return ret;
}

/* ---- compact ----------------------------------------------------------- */

int cmd_compact(int argc, char **argv)
{
	char *pos[1], h[32];
	coil_store *s;
	uint64_t got = 0;
	int npos, rc, ret = CLI_OK;

	rc = cli_parse_args("compact", argc, argv, NULL, pos, 1, &npos);
	if (rc == 0 && npos != 1)
		rc = cli_usage_error("compact", "expected STORE");
	if (rc)
		return rc;
	if (cli_open_store("compact", pos[0], 0, &s) < 0)
		return CLI_FAIL;
	rc = coil_compact(s, &got);
	if (rc < 0) {
		cli_err("compact '%s': %s", pos[0], cli_reason(rc));
		ret = CLI_FAIL;
	} else {
		printf("%s: gave back %s (%llu bytes)\n", pos[0],
		       cli_human(got, h, sizeof(h)), (unsigned long long)got);
	}
	if (cli_close_store(pos[0], s) < 0)
		ret = CLI_FAIL;
	return ret;
}

/* ---- check ------------------------------------------------------------- */

/* A failed read is narrowed to pieces of this size, so a report says which
 * part of a large object is damaged (a blob is at most 1 MiB). */
#define CHECK_PIECE (64u << 10)

struct check {
	coil_store *s;
	uint8_t *buf;
	struct cli_progress prog;
	uint64_t done, bytes, bad_ranges, bad_objects;
};

static void check_object(struct check *c, const struct cli_entry *e)
{
	uint64_t bad = c->bad_ranges;
	coil_obj *h;
	int rc = coil_obj_open(c->s, e->name, 0, &h);

	if (rc < 0) {
		cli_err("check: object '%s': %s", e->name, cli_reason(rc));
		c->bad_ranges++;
		c->bad_objects++;
		return;
	}
	for (uint64_t off = 0; off < e->size && !cli_interrupted;
	     off += CLI_BUF_BYTES) {
		int64_t n = coil_pread(h, c->buf, CLI_BUF_BYTES, off);

		if (n >= 0) {
			c->bytes += (uint64_t)n;
		} else {
			for (uint64_t o = off; o < off + CLI_BUF_BYTES && o < e->size;
			     o += CHECK_PIECE) {
				int64_t m = coil_pread(h, c->buf, CHECK_PIECE, o);
				uint64_t end = o + CHECK_PIECE < e->size ?
						       o + CHECK_PIECE : e->size;

				if (m >= 0) {
					c->bytes += (uint64_t)m;
					continue;
				}
				cli_err("check: object '%s' bytes [%llu, %llu): %s",
					e->name, (unsigned long long)o,
					(unsigned long long)end, cli_reason((int)m));
				c->bad_ranges++;
			}
		}
		c->done += e->size - off < CLI_BUF_BYTES ? e->size - off :
							  CLI_BUF_BYTES;
		cli_progress_update(&c->prog, c->done);
	}
	if (c->bad_ranges > bad)
		c->bad_objects++;
	coil_obj_close(h);
}

int cmd_check(int argc, char **argv)
{
	struct check c = { 0 };
	struct cli_entry *e = NULL;
	uint64_t total = 0;
	char *pos[1], h[32];
	size_t n = 0;
	int npos, rc, ret;

	bool deep = false;
	const struct cli_opt opts[] = {
		{ "--deep", 0, NULL, &deep },
		{ 0 },
	};

	rc = cli_parse_args("check", argc, argv, opts, pos, 1, &npos);
	if (rc)
		return rc;
	if (npos != 1)
		return cli_usage_error("check", "expected STORE");
	if (deep)
		return cli_check_deep(pos[0]);
	rc = cli_open_store("check", pos[0], COIL_RDONLY, &c.s);
	if (rc < 0)
		return rc == -EIO ? CLI_DAMAGED : CLI_FAIL;
	c.buf = malloc(CLI_BUF_BYTES);
	rc = c.buf ? cli_list_sorted(c.s, &e, &n) : -ENOMEM;
	if (rc < 0) {
		cli_err("check '%s': %s", pos[0], cli_reason(rc));
		free(c.buf);
		cli_close_store(pos[0], c.s);
		return CLI_FAIL;
	}
	for (size_t i = 0; i < n; i++)
		total += e[i].size;
	cli_progress_start(&c.prog, "check", total);
	for (size_t i = 0; i < n && !cli_interrupted; i++)
		check_object(&c, &e[i]);
	cli_progress_end(&c.prog);
	if (cli_interrupted) {
		cli_err("check '%s': interrupted", pos[0]);
		ret = CLI_FAIL;
	} else {
		printf("checked %zu objects, %s (%llu bytes): ", n,
		       cli_human(c.bytes, h, sizeof(h)),
		       (unsigned long long)c.bytes);
		if (c.bad_ranges)
			printf("%llu damaged ranges in %llu objects\n",
			       (unsigned long long)c.bad_ranges,
			       (unsigned long long)c.bad_objects);
		else
			printf("no damage\n");
		ret = c.bad_ranges ? CLI_DAMAGED : CLI_OK;
	}
	cli_list_free(e, n);
	free(c.buf);
	if (cli_close_store(pos[0], c.s) < 0 && ret == CLI_OK)
		ret = CLI_FAIL;
	return ret;
}
