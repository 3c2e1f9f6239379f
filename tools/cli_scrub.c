/* tools/cli_scrub.c — coil scrub, coil check --deep and coil salvage: the
 * commands that look for damage (through coil_scrub_* and coil_check) and
 * the one that saves what is left of a damaged store (COIL_SALVAGE). */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"

/* A salvage read that fails is narrowed to pieces of this size: the
 * smallest unit coil checksums. */
#define SALVAGE_PIECE 4096u

/* An object name as the report prints it: printable ASCII as is, other
 * bytes (and the quote and backslash) as \xNN. */
static void put_name(FILE *f, const char *name, size_t len)
{
	fputc('\'', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\')
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('\'', f);
}

/* One finding of coil_scrub_damage or coil_check, one line on stdout. */
static int print_damage(void *arg, const struct coil_damage *d)
{
	(void)arg;
	if (d->object) {
		printf("damaged: object ");
		put_name(stdout, d->object, d->object_len);
		printf(" bytes [%llu, %llu): %s\n", (unsigned long long)d->off,
		       (unsigned long long)(d->off + d->len), d->what);
	} else if (d->len) {
		printf("damaged: store metadata at device bytes [%llu, %llu): "
		       "%s\n", (unsigned long long)d->off,
		       (unsigned long long)(d->off + d->len), d->what);
	} else {
		printf("inconsistent: %s\n", d->what);
	}
	return 0;
}

/* The exit status for what a pass or check found (docs/cli.md). */
static int severity(const struct coil_scrub_info *in)
{
	if (in->metadata_errors || in->accounting_errors)
		return CLI_DAMAGED_META;
	return in->damaged_ranges ? CLI_DAMAGED : CLI_OK;
}

static void summary(const char *what, const struct coil_scrub_info *in)
{
	char h[32];

	printf("%s %llu blobs, %s: ", what,
	       (unsigned long long)in->blobs_verified,
	       cli_human(in->bytes_done, h, sizeof(h)));
	if (!in->damaged_ranges && !in->metadata_errors &&
	    !in->accounting_errors) {
		printf("no damage\n");
		return;
	}
	printf("%llu damaged ranges (%llu bytes) in objects, %llu metadata "
	       "errors, %llu accounting errors\n",
	       (unsigned long long)in->damaged_ranges,
	       (unsigned long long)in->damaged_bytes,
	       (unsigned long long)in->metadata_errors,
	       (unsigned long long)in->accounting_errors);
}

/* Open with @o, retrying without O_DIRECT where the file system refuses
 * it; a failure is reported. */
static int open_with(const char *cmd, const char *path, struct coil_options *o,
		     coil_store **s)
{
	int rc = coil_open(path, o, s);

	if (rc == -EINVAL) {
		o->flags |= COIL_NO_DIRECT;
		rc = coil_open(path, o, s);
	}
	if (rc == -EIO)
		cli_err("%s: open '%s': damaged store (its superblocks, "
			"checkpoint or journal do not read back); 'coil "
			"salvage' can export what is left", cmd, path);
	else if (rc < 0)
		cli_err("%s: open '%s': %s", cmd, path, cli_reason(rc));
	return rc;
}

/* ---- scrub ----------------------------------------------------------------- */

struct waiter {
	coil_store *s;
	pthread_mutex_t mu;
	bool done;
	int rc;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	int rc = coil_scrub_wait(w->s);

	pthread_mutex_lock(&w->mu);
	w->rc = rc;
	w->done = true;
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int cmd_scrub(int argc, char **argv)
{
	const char *rate_s = NULL;
	const struct cli_opt opts[] = {
		{ "--rate", 'r', &rate_s, NULL },
		{ 0 },
	};
	struct waiter w = { .mu = PTHREAD_MUTEX_INITIALIZER };
	struct coil_scrub_info in;
	struct coil_options o;
	struct cli_progress prog;
	pthread_t th;
	uint64_t rate = 0;
	char *pos[1];
	int npos, rc, ret;

	rc = cli_parse_args("scrub", argc, argv, opts, pos, 1, &npos);
	if (rc)
		return rc;
	if (npos != 1)
		return cli_usage_error("scrub", "expected STORE");
	if (rate_s && cli_parse_size(rate_s, &rate) < 0) {
		cli_err("scrub: rate '%s': not a size (bytes a second: 64M)",
			rate_s);
		return CLI_USAGE;
	}
	coil_options_init(&o);
	o.flags = COIL_RDONLY;
	o.scrub_rate = rate;
	o.scrub_interval = 0;
	rc = open_with("scrub", pos[0], &o, &w.s);
	if (rc < 0)
		return rc == -EIO ? CLI_DAMAGED_META : CLI_FAIL;
	rc = coil_scrub_start(w.s);
	if (rc == 0 && pthread_create(&th, NULL, wait_main, &w))
		rc = -EAGAIN;
	if (rc < 0) {
		cli_err("scrub '%s': %s", pos[0], cli_reason(rc));
		cli_close_store(pos[0], w.s);
		return CLI_FAIL;
	}
	cli_progress_start(&prog, "scrub", 0);
	for (;;) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		bool done;

		pthread_mutex_lock(&w.mu);
		done = w.done;
		pthread_mutex_unlock(&w.mu);
		if (done || cli_interrupted)
			break;
		if (coil_scrub_info(w.s, &in) == 0) {
			prog.total = in.bytes_total;
			cli_progress_update(&prog, in.bytes_done);
		}
		nanosleep(&ts, NULL);
	}
	cli_progress_end(&prog);
	if (cli_interrupted) {
		/* closing cuts the pass short; the waiter then returns */
		cli_err("scrub '%s': interrupted", pos[0]);
		cli_close_store(pos[0], w.s);
		pthread_join(th, NULL);
		return CLI_FAIL;
	}
	pthread_join(th, NULL);
	coil_scrub_damage(w.s, print_damage, NULL);
	coil_scrub_info(w.s, &in);
	if (w.rc < 0 && w.rc != -EIO) {
		cli_err("scrub '%s': %s", pos[0], cli_reason(w.rc));
		ret = CLI_FAIL;
	} else {
		summary("scrubbed", &in);
		ret = severity(&in);
	}
	if (cli_close_store(pos[0], w.s) < 0 && ret == CLI_OK)
		ret = CLI_FAIL;
	return ret;
}

/* ---- check --deep ---------------------------------------------------------- */

int cli_check_deep(const char *path)
{
	struct coil_scrub_info in;
	struct coil_options o;
	coil_store *s;
	int rc, ret;

	coil_options_init(&o);
	o.flags = COIL_RDONLY;
	o.scrub_interval = 0;
	rc = open_with("check", path, &o, &s);
	if (rc < 0)
		return rc == -EIO ? CLI_DAMAGED_META : CLI_FAIL;
	rc = coil_check(s, print_damage, NULL, &in);
	if (rc < 0) {
		cli_err("check '%s': %s", path, cli_reason(rc));
		ret = CLI_FAIL;
	} else {
		summary("checked", &in);
		ret = severity(&in);
	}
	if (cli_close_store(path, s) < 0 && ret == CLI_OK)
		ret = CLI_FAIL;
	return ret;
}

/* ---- salvage --------------------------------------------------------------- */

/* A file name for an object name: letters, digits, '-', '_' and '.' as
 * they are (not a leading '.'), every other byte as %XX; names of up to
 * 255 bytes give at most 765. */
static void file_name(char *out, const char *name, size_t len)
{
	size_t k = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '_' ||
			    (c == '.' && i > 0);

		if (keep)
			out[k++] = (char)c;
		else
			k += (size_t)sprintf(out + k, "%%%02X", c);
	}
	out[k] = 0;
}

struct salvage {
	coil_store *s;
	FILE *rep;
	uint8_t *buf;
	uint64_t objects, intact, damaged, lost_bytes, bytes, notes;
};

/* Both the report file and stdout hear the same lines. */
static void say(struct salvage *sv, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void say(struct salvage *sv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	va_start(ap, fmt);
	vfprintf(sv->rep, fmt, ap);
	va_end(ap);
}

static void lost_range(struct salvage *sv, const struct cli_entry *e,
		       uint64_t a, uint64_t z)
{
	say(sv, "lost: object ");
	put_name(stdout, e->name, e->len);
	put_name(sv->rep, e->name, e->len);
	say(sv, " bytes [%llu, %llu): unreadable (zeros in the file)\n",
	    (unsigned long long)a, (unsigned long long)z);
	sv->lost_bytes += z - a;
}

/* Copy every readable byte of @e into @fd; report what is not.
 * @return 0 or -errno of the output file. */
static int salvage_object(struct salvage *sv, const struct cli_entry *e,
			  int fd)
{
	uint64_t lost0 = sv->lost_bytes, bad_a = 0, bad_z = 0;
	coil_obj *h;
	int rc = coil_obj_open(sv->s, e->name, 0, &h);

	if (rc < 0) {
		say(sv, "lost: object ");
		put_name(stdout, e->name, e->len);
		put_name(sv->rep, e->name, e->len);
		say(sv, ": does not open (%s)\n", cli_reason(rc));
		sv->lost_bytes += e->size;
		sv->damaged++;
		return 0;
	}
	for (uint64_t off = 0; off < e->size && !cli_interrupted;
	     off += CLI_BUF_BYTES) {
		uint64_t n = e->size - off < CLI_BUF_BYTES ? e->size - off :
							     CLI_BUF_BYTES;
		int64_t got = coil_pread(h, sv->buf, n, off);

		if (got == (int64_t)n) {
			if (pwrite(fd, sv->buf, n, (off_t)off) != (ssize_t)n) {
				rc = -errno;
				break;
			}
			sv->bytes += n;
			continue;
		}
		/* narrow the failure down to checksummed pieces */
		for (uint64_t p = off; p < off + n; p += SALVAGE_PIECE) {
			uint64_t m = off + n - p < SALVAGE_PIECE ?
					     off + n - p : SALVAGE_PIECE;
			int64_t g = coil_pread(h, sv->buf, m, p);

			if (g == (int64_t)m) {
				if (pwrite(fd, sv->buf, m, (off_t)p) !=
				    (ssize_t)m) {
					rc = -errno;
					break;
				}
				sv->bytes += m;
				continue;
			}
			if (bad_z == p) {
				bad_z = p + m;
				continue;
			}
			if (bad_z > bad_a)
				lost_range(sv, e, bad_a, bad_z);
			bad_a = p;
			bad_z = p + m;
		}
		if (rc < 0)
			break;
	}
	if (bad_z > bad_a)
		lost_range(sv, e, bad_a, bad_z);
	coil_obj_close(h);
	if (rc == 0 && ftruncate(fd, (off_t)e->size) < 0)
		rc = -errno;
	if (sv->lost_bytes > lost0)
		sv->damaged++;
	else
		sv->intact++;
	return rc;
}

/* The notes of a salvage open: the strings of "salvage":{..."notes":[...]}
 * in coil_stats_json (coil's own text, without quotes inside). */
static void salvage_notes(struct salvage *sv)
{
	char *j, *p, *end;

	if (coil_stats_json_dup(sv->s, 0, &j) < 0)
		return;
	if ((p = strstr(j, "\"salvage\":{")) && (p = strstr(p, "\"notes\":["))) {
		p += 9;
		while (*p == '"' && (end = strchr(p + 1, '"'))) {
			say(sv, "metadata: %.*s\n", (int)(end - p - 1), p + 1);
			sv->notes++;
			p = end + 1;
			if (*p == ',')
				p++;
		}
	}
	if ((p = strstr(j, "\"unverified_records\":")) && atoll(p + 21) > 0)
		say(sv, "metadata: %lld journal records refer to data that "
		    "does not verify (listed below as lost ranges)\n",
		    atoll(p + 21));
	free(j);
}

int cmd_salvage(int argc, char **argv)
{
	struct salvage sv = { 0 };
	struct cli_entry *e = NULL;
	struct coil_options o;
	char *pos[2], *fname = NULL, h1[32];
	size_t n = 0;
	int npos, rc, ret = CLI_OK;

	rc = cli_parse_args("salvage", argc, argv, NULL, pos, 2, &npos);
	if (rc)
		return rc;
	if (npos != 2)
		return cli_usage_error("salvage", "expected STORE DIR");
	if (mkdir(pos[1], 0755) < 0 && errno != EEXIST) {
		cli_err("salvage: directory '%s': %s", pos[1], strerror(errno));
		return CLI_FAIL;
	}
	fname = malloc(strlen(pos[1]) + 3 * COIL_NAME_MAX + 32);
	sv.buf = malloc(CLI_BUF_BYTES);
	if (!fname || !sv.buf) {
		cli_err("salvage: out of memory");
		ret = CLI_FAIL;
		goto out;
	}
	sprintf(fname, "%s/objects", pos[1]);
	if (mkdir(fname, 0755) < 0) {
		cli_err("salvage: directory '%s': %s%s", fname, strerror(errno),
			errno == EEXIST ? " (salvage into a new directory)" : "");
		ret = CLI_FAIL;
		goto out;
	}
	sprintf(fname, "%s/report.txt", pos[1]);
	sv.rep = fopen(fname, "wx");
	if (!sv.rep) {
		cli_err("salvage: '%s': %s", fname, strerror(errno));
		ret = CLI_FAIL;
		goto out;
	}
	coil_options_init(&o);
	o.flags = COIL_SALVAGE;
	o.scrub_interval = 0;
	/* No readahead: a demand read that meets a prefetch of the whole
	 * blob fails with it when another sector of that blob is damaged,
	 * and salvage narrows failures down to the sectors that are. */
	o.prefetch = 0;
	rc = open_with("salvage", pos[0], &o, &sv.s);
	if (rc < 0) {
		fprintf(sv.rep, "the store does not open even for salvage: "
			"%s\n", cli_reason(rc));
		ret = CLI_FAIL;
		goto out;
	}
	salvage_notes(&sv);
	rc = cli_list_sorted(sv.s, &e, &n);
	if (rc < 0) {
		cli_err("salvage '%s': %s", pos[0], cli_reason(rc));
		ret = CLI_FAIL;
	}
	for (size_t i = 0; i < n && ret == CLI_OK && !cli_interrupted; i++) {
		int fd;

		sprintf(fname, "%s/objects/", pos[1]);
		file_name(fname + strlen(fname), e[i].name, e[i].len);
		/* past a file system's name limit: a numbered name (the
		 * report pairs it with the object's) */
		if (strlen(fname + strlen(pos[1]) + 9) > 250)
			sprintf(fname + strlen(pos[1]) + 9, "%%long-name-%zu", i);
		fd = open(fname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			cli_err("salvage: '%s': %s", fname, strerror(errno));
			ret = CLI_FAIL;
			break;
		}
		sv.objects++;
		fprintf(sv.rep, "object ");
		put_name(sv.rep, e[i].name, e[i].len);
		fprintf(sv.rep, " -> objects/%s (%llu bytes)\n",
			fname + strlen(pos[1]) + 9,
			(unsigned long long)e[i].size);
		rc = salvage_object(&sv, &e[i], fd);
		if (close(fd) < 0 && rc == 0)
			rc = -errno;
		if (rc < 0) {
			cli_err("salvage: '%s': %s", fname, strerror(-rc));
			ret = CLI_FAIL;
		}
	}
	if (cli_interrupted) {
		cli_err("salvage '%s': interrupted", pos[0]);
		ret = CLI_FAIL;
	}
	say(&sv, "salvaged %llu objects into %s/objects: %llu intact, %llu "
	    "damaged, %s (%llu bytes) read, %llu bytes lost\n",
	    (unsigned long long)sv.objects, pos[1],
	    (unsigned long long)sv.intact, (unsigned long long)sv.damaged,
	    cli_human(sv.bytes, h1, sizeof(h1)), (unsigned long long)sv.bytes,
	    (unsigned long long)sv.lost_bytes);
	if (ret == CLI_OK && (sv.damaged || sv.notes))
		ret = CLI_DAMAGED;
	cli_list_free(e, n);
	coil_close(sv.s);
out:
	if (sv.rep && fclose(sv.rep) != 0 && ret == CLI_OK)
		ret = CLI_FAIL;
	free(fname);
	free(sv.buf);
	return ret;
}
