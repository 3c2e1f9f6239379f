/* tools/cli_util.c — messages, sizes, progress, the store and the command
 * line, shared by every command of the coil tool. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"

volatile sig_atomic_t cli_interrupted;

/* The progress line on the terminal, if one is: a message erases it first,
 * not to be glued to its end (import and export go on after one). */
static struct cli_progress *progress_shown;

void cli_err(const char *fmt, ...)
{
	va_list ap;

	if (progress_shown && progress_shown->shown) {
		fputs("\r\033[K", stderr);
		progress_shown->shown = false; /* the next update draws it */
	}
	fputs("coil: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *cli_reason(int rc)
{
	switch (rc) {
	case -ENOENT: return "no such file";
	case -EISDIR: return "is a directory";
	case -EMEDIUMTYPE: return "not a coil store (no valid superblock)";
	case -EIO: return "I/O error or damaged data (checksum mismatch)";
	case -EBUSY: return "store is in use (open in another process)";
	case -EACCES: return "permission denied";
	case -EPERM: return "operation not permitted";
	case -ENOSPC: return "store is full";
	case -EROFS: return "store or file system is read-only";
	case -EINTR: return "interrupted";
	default: return coil_strerror(rc);
	}
}

int cli_open_store(const char *cmd, const char *path, unsigned flags,
		   coil_store **s)
{
	return cli_open_store_codec(cmd, path, flags, NULL, s);
}

int cli_open_store_codec(const char *cmd, const char *path, unsigned flags,
			 const char *codec, coil_store **s)
{
	struct coil_options o;
	int rc;

	coil_options_init(&o);
	o.flags = flags;
	if (codec)
		o.compression = codec;
	rc = coil_open(path, &o, s);
	if (rc == -EINVAL) {
		/* The file system may not do O_DIRECT (tmpfs). */
		o.flags |= COIL_NO_DIRECT;
		rc = coil_open(path, &o, s);
	}
	if (rc == 0)
		return 0;
	if (rc == -EIO)
		cli_err("%s: open '%s': damaged store or device error (its "
			"superblocks, checkpoint or journal do not read back)",
			cmd, path);
	else if (rc == -ENOENT)
		cli_err("%s: open '%s': no such file (make one with 'coil "
			"create')", cmd, path);
	else
		cli_err("%s: open '%s': %s", cmd, path, cli_reason(rc));
	return rc;
}

int cli_close_store(const char *path, coil_store *s)
{
	int rc = coil_close(s);

	if (rc < 0)
		cli_err("close '%s': %s", path, cli_reason(rc));
	return rc;
}

int cli_parse_size(const char *text, uint64_t *v)
{
	unsigned long long n;
	unsigned shift = 0;
	char *end;

	if (!text || *text < '0' || *text > '9')
		return -EINVAL;
	errno = 0;
	n = strtoull(text, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && (!strcmp(end, "iB") || !strcmp(end, "ib")))
		end += 2;
	else if (!strcmp(end, "B") || !strcmp(end, "b"))
		end += 1;
	if (*end)
		return -EINVAL;
	if (shift && n > (UINT64_MAX >> shift))
		return -ERANGE;
	*v = (uint64_t)n << shift;
	return 0;
}

const char *cli_human(uint64_t bytes, char *buf, size_t len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cli_progress_start(struct cli_progress *p, const char *what, uint64_t total)
{
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->total = total;
	p->tty = isatty(STDERR_FILENO) == 1;
	p->start_ns = now_ns();
}

void cli_progress_update(struct cli_progress *p, uint64_t done)
{
	char a[32], b[32], items[64] = "";
	uint64_t t;

	if (!p->tty)
		return;
	t = now_ns();
	/* Nothing for a quick operation; then five updates a second. */
	if (t - p->start_ns < 1000000000u || t - p->shown_ns < 200000000u)
		return;
	p->shown_ns = t;
	p->shown = true;
	progress_shown = p;
	if (p->unit)
		snprintf(items, sizeof(items), "%llu/%llu %s, ",
			 (unsigned long long)p->items,
			 (unsigned long long)p->nitems, p->unit);
	/* A file that grew since it was counted must not show past 100 %. */
	if (p->total && done <= p->total)
		fprintf(stderr, "\r%s: %s%s of %s (%u%%)\033[K", p->what, items,
			cli_human(done, a, sizeof(a)),
			cli_human(p->total, b, sizeof(b)),
			(unsigned)(done * 100 / p->total));
	else
		fprintf(stderr, "\r%s: %s%s\033[K", p->what, items,
			cli_human(done, a, sizeof(a)));
	fflush(stderr);
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = false;
	if (progress_shown == p)
		progress_shown = NULL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "coil: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: %s\n(see 'coil help %s')\n",
		cli_synopsis(cmd), cmd);
	return CLI_USAGE;
}

static const struct cli_opt *find_long(const struct cli_opt *opts,
				       const char *a, const char **val)
{
	size_t n = strcspn(a, "=");

	*val = a[n] == '=' ? a + n + 1 : NULL;
	for (; opts && opts->lng; opts++)
		if (strlen(opts->lng) == n && !strncmp(opts->lng, a, n))
			return opts;
	return NULL;
}

int cli_parse_args(const char *cmd, int argc, char **argv,
		   const struct cli_opt *opts, char **pos, int maxpos, int *npos)
{
	bool only_args = false;

	*npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct cli_opt *o = NULL;
		const char *val = NULL;

		if (only_args || a[0] != '-' || !a[1]) {
			if (*npos == maxpos)
				return cli_usage_error(cmd, "unexpected argument '%s'", a);
			pos[(*npos)++] = argv[i];
			continue;
		}
		if (!strcmp(a, "--")) {
			only_args = true;
			continue;
		}
		if (a[1] == '-') {
			o = find_long(opts, a, &val);
		} else if (!a[2]) {
			for (const struct cli_opt *p = opts; p && p->lng; p++)
				if (p->shrt == a[1])
					o = p;
		}
		if (!o)
			return cli_usage_error(cmd, "unknown option '%s'", a);
		if (!o->arg) {
			if (val)
				return cli_usage_error(cmd, "%s takes no value", o->lng);
			*o->flag = true;
			continue;
		}
		if (!val) {
			if (i + 1 == argc)
				return cli_usage_error(cmd, "%s needs a value", o->lng);
			val = argv[++i];
		}
		*o->arg = val;
	}
	return 0;
}

static int entry_cmp(const void *x, const void *y)
{
	const struct cli_entry *a = x, *b = y;
	int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);

	return c ? c : (a->len > b->len) - (a->len < b->len);
}

struct list_ctx {
	struct cli_entry *e;
	size_t n, cap;
	int err;
};

static int list_add(void *arg, const char *name, size_t len, uint64_t size)
{
	struct list_ctx *c = arg;

	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct cli_entry *e = realloc(c->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		c->e = e;
		c->cap = cap;
	}
	c->e[c->n].name = malloc(len + 1);
	if (!c->e[c->n].name)
		return -ENOMEM;
	memcpy(c->e[c->n].name, name, len + 1);
	c->e[c->n].len = len;
	c->e[c->n].size = size;
	c->n++;
	return 0;
}

int cli_list_sorted(coil_store *s, struct cli_entry **out, size_t *n)
{
	struct list_ctx c = { 0 };
	int rc = coil_obj_list(s, list_add, &c);

	if (rc < 0) {
		cli_list_free(c.e, c.n);
		return rc;
	}
	if (c.n)
		qsort(c.e, c.n, sizeof(*c.e), entry_cmp);
	*out = c.e;
	*n = c.n;
	return 0;
}

void cli_list_free(struct cli_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}
