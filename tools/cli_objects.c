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

/* ---- mv, cp ---------------------------------------------------------------- */

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

/* cp -f: the clone replaces an existing DST in the same step (a batch:
 * remove it, then clone); without one, a plain clone. */
static int clone_replace(coil_store *s, const char *src, const char *dst)
{
	coil_batch *b;
	coil_obj *h;
	int rc;

	rc = coil_obj_open(s, dst, 0, &h);
	if (rc == -ENOENT)
		return coil_obj_clone(s, src, dst);
	if (rc < 0)
		return rc;
	coil_obj_close(h);
	rc = coil_batch_new(s, &b);
	if (rc < 0)
		return rc;
	rc = coil_batch_remove(b, dst);
	if (rc == 0)
		rc = coil_batch_clone(b, src, dst);
	if (rc < 0) {
		coil_batch_free(b);
		return rc;
	}
	return coil_batch_commit(b);
}

/* mv and cp: STORE, two names, one step, then a sync. */
static int two_names(const char *cmd, int argc, char **argv, bool cp)
{
	bool flag = false;
	const struct cli_opt mv_opts[] = {
		{ "--no-clobber", 'n', NULL, &flag },
		{ 0 },
	};
	const struct cli_opt cp_opts[] = {
		{ "--force", 'f', NULL, &flag },
		{ 0 },
	};
	const char *store, *from, *to, *why;
	char *pos[3];
	coil_store *s;
	int npos, rc, ret = CLI_FAIL;

	rc = cli_parse_args(cmd, argc, argv, cp ? cp_opts : mv_opts, pos, 3,
			    &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error(cmd, cp ? "expected STORE SRC DST" :
						 "expected STORE OLD NEW");
	store = pos[0];
	from = pos[1];
	to = pos[2];
	for (int i = 1; i < 3; i++) {
		why = mv_name_problem(pos[i]);
		if (why) {
			cli_err("%s: object name '%.40s%s' %s", cmd, pos[i],
				strlen(pos[i]) > 40 ? "..." : "", why);
			return CLI_FAIL;
		}
	}
	if (cli_open_store(cmd, store, 0, &s) < 0)
		return CLI_FAIL;
	if (cp)
		rc = flag ? clone_replace(s, from, to) :
			    coil_obj_clone(s, from, to);
	else
		rc = coil_obj_rename(s, from, to,
				     flag ? COIL_RENAME_NOREPLACE : 0);
	if (rc == 0)
		rc = coil_sync(s); /* durable before exit, as put and rm */
	if (rc == 0)
		ret = CLI_OK;
	else if (rc == -ENOENT)
		cli_err("%s: no object '%s' in store '%s'", cmd, from, store);
	else if (rc == -EEXIST)
		cli_err("%s: object '%s' already exists in store '%s' (%s)",
			cmd, to, store,
			cp ? "-f replaces it" : "--no-clobber: nothing renamed");
	else
		cli_err("%s '%s' to '%s' in store '%s': %s", cmd, from, to,
			store, cli_reason(rc));
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	return ret;
}

int cmd_mv(int argc, char **argv)
{
	return two_names("mv", argc, argv, false);
}

int cmd_cp(int argc, char **argv)
{
	return two_names("cp", argc, argv, true);
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

/* ---- optimize ---------------------------------------------------------- */

/* Work per coil_optimize call: the progress line moves between calls. */
#define OPTIMIZE_STEP (64ull << 20)

/* The number after "@key": in the "optimizer" section of @s's stats (the
 * counters of this open, so of this command); 0 when missing. */
static unsigned long long optimizer_stat(coil_store *s, const char *key)
{
	unsigned long long v = 0;
	char *j, *p;

	if (coil_stats_json_dup(s, 0, &j) < 0)
		return 0;
	if ((p = strstr(j, "\"optimizer\":{")) && (p = strstr(p, key)))
		v = strtoull(p + strlen(key), NULL, 10);
	free(j);
	return v;
}

int cmd_optimize(int argc, char **argv)
{
	const char *level_s = NULL;
	const struct cli_opt opts[] = {
		{ "--level", 'l', &level_s, NULL },
		{ 0 },
	};
	struct coil_optimize_opts o = { .budget_bytes = OPTIMIZE_STEP };
	struct coil_optimize_report r, sum = { 0 };
	struct cli_progress prog;
	char *pos[1], h[32], *end, merged[80] = "";
	unsigned long long merges;
	coil_store *s;
	int npos, rc, ret = CLI_OK;

	rc = cli_parse_args("optimize", argc, argv, opts, pos, 1, &npos);
	if (rc == 0 && npos != 1)
		rc = cli_usage_error("optimize", "expected STORE");
	if (rc)
		return rc;
	if (level_s) {
		long v = strtol(level_s, &end, 10);

		if (*level_s == 0 || *end || v < 1 || v > 22)
			return cli_usage_error("optimize", "--level takes 1..22");
		o.level = (int)v;
	}
	if (cli_open_store("optimize", pos[0], 0, &s) < 0)
		return CLI_FAIL;
	cli_progress_start(&prog, "optimize", 0);
	do {
		rc = coil_optimize(s, &o, &r);
		sum.passes += r.passes;
		sum.scanned += r.scanned;
		sum.rewritten += r.rewritten;
		sum.saved_bytes += r.saved_bytes;
		sum.stale_skips += r.stale_skips;
		sum.no_gain += r.no_gain;
		sum.errors += r.errors;
		sum.dicts_made += r.dicts_made;
		sum.dict_bytes += r.dict_bytes;
		/* the first call trained what pays: the others only encode */
		o.flags |= COIL_OPTIMIZE_NO_DICTS;
		cli_progress_update(&prog, sum.saved_bytes);
	} while (rc == 1 && r.passes > 0);
	cli_progress_end(&prog);
	if (rc < 0) {
		cli_err("optimize '%s': %s", pos[0], cli_reason(rc));
		ret = CLI_FAIL;
	}
	merges = optimizer_stat(s, "\"merges\":");
	if (merges)
		snprintf(merged, sizeof(merged), "; %llu small blobs merged "
			 "into %llu", optimizer_stat(s, "\"merged_blobs\":"),
			 merges);
	printf("%s: %llu dictionaries trained (%llu bytes), %llu blobs encoded "
	       "again, %llu written smaller, saved %s (%llu bytes); %llu no "
	       "smaller, %llu overtaken by newer writes, %llu failed their "
	       "check%s%s\n", pos[0], (unsigned long long)sum.dicts_made,
	       (unsigned long long)sum.dict_bytes,
	       (unsigned long long)sum.scanned,
	       (unsigned long long)sum.rewritten,
	       cli_human(sum.saved_bytes, h, sizeof(h)),
	       (unsigned long long)sum.saved_bytes,
	       (unsigned long long)sum.no_gain,
	       (unsigned long long)sum.stale_skips,
	       (unsigned long long)sum.errors, merged,
	       rc == 1 ? " (more remains: no room to relocate into)" : "");
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
