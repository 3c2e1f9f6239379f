/* tools/cli_copy.c — coil put and coil get: copies between a file and an
 * object that leave nothing half made behind when they fail (import and
 * export make theirs here too, one per file).
 *
 * put writes a temporary object and renames it to NAME (over an existing
 * one with --force) only once every byte is written and durable; on any
 * failure the temporary object is removed and NAME is as it was.  get
 * writes a temporary file in the destination's directory and renames it
 * over the destination only after the last byte was read (every read
 * verifies checksums) and fsync'd. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"

static const char *name_problem(int rc)
{
	if (rc == -ENAMETOOLONG)
		return "name too long (at most 255 bytes)";
	if (rc == -EINVAL)
		return "not a valid object name";
	return NULL;
}

/* Copy @fd into @h from offset 0: *@done bytes.  @return 0, or the
 * negative errno with *@local set when reading @fd failed (not the
 * store). */
static int put_copy(int fd, coil_obj *h, struct cli_progress *p,
		    bool *local, uint64_t *done)
{
	uint8_t *buf = malloc(CLI_BUF_BYTES);
	uint64_t off = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	while (rc == 0) {
		ssize_t n = cli_interrupted ? -1 : read(fd, buf, CLI_BUF_BYTES);
		int64_t w;

		if (cli_interrupted) {
			rc = -EINTR;
			break;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			*local = true;
			break;
		}
		if (n == 0)
			break;
		w = coil_pwrite(h, buf, (size_t)n, off);
		if (w < 0)
			rc = (int)w;
		off += (uint64_t)n;
		cli_progress_update(p, p->base + off);
	}
	free(buf);
	*done = off;
	return rc;
}

/* ---- put's temporary object ---------------------------------------------
 *
 * ".coil-put." + NAME + "." + 16 hex digits, or, when that would pass
 * COIL_NAME_MAX, ".coil-put.#" + a 64-bit hash of NAME + "." + the digits.
 * The prefix is the tool's (it starts with a dot so that it sorts apart
 * and reads as not the user's); the random digits keep two puts of one
 * name apart, and the create is exclusive, so an object that happens to
 * hold the name is never touched: another suffix is tried instead. */
#define PUT_TEMP_PREFIX ".coil-put."
#define PUT_TEMP_DIGITS 16
/* Exclusive creates tried before giving up: a 64-bit random suffix that
 * collides twice means something other than chance is at work. */
#define PUT_TEMP_TRIES 4

static uint64_t name_hash(const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h;
}

static uint64_t temp_suffix(void)
{
	struct timespec ts;
	uint64_t x;

	if (getrandom(&x, sizeof(x), GRND_NONBLOCK) == (ssize_t)sizeof(x))
		return x;
	/* No entropy yet (early boot): the pid and the clock still keep
	 * concurrent tools apart, and the create is exclusive anyway. */
	clock_gettime(CLOCK_REALTIME, &ts);
	x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return x ^ ((uint64_t)getpid() << 40);
}

/* @tmp holds COIL_NAME_MAX + 1 bytes. */
static void temp_name_for(const char *name, uint64_t suffix, char *tmp)
{
	size_t len = strlen(name);
	int n;

	if (sizeof(PUT_TEMP_PREFIX) - 1 + len + 1 + PUT_TEMP_DIGITS <= COIL_NAME_MAX)
		n = snprintf(tmp, COIL_NAME_MAX + 1, PUT_TEMP_PREFIX "%s.%016llx",
			     name, (unsigned long long)suffix);
	else
		n = snprintf(tmp, COIL_NAME_MAX + 1,
			     PUT_TEMP_PREFIX "#%016llx.%016llx",
			     (unsigned long long)name_hash(name),
			     (unsigned long long)suffix);
	assert(n > 0 && n <= COIL_NAME_MAX);
}

/* Create a new temporary object for @name: its name in @tmp, the handle
 * in *@h.  @return 0 or the negative errno (@tmp then ""). */
static int temp_create(coil_store *s, const char *name, char *tmp, coil_obj **h)
{
	int rc = -EEXIST;

	for (int i = 0; i < PUT_TEMP_TRIES && rc == -EEXIST; i++) {
		temp_name_for(name, temp_suffix(), tmp);
		rc = coil_obj_open(s, tmp, COIL_CREATE | COIL_EXCL, h);
	}
	if (rc < 0)
		tmp[0] = 0;
	return rc;
}

/* ---- put ----------------------------------------------------------------- */

int cli_put_fd(coil_store *s, struct cli_copy *c, const char *name, int fd,
	       const char *file)
{
	const char *cmd = c->cmd, *store = c->store;
	struct cli_progress own, *p = c->p ? c->p : &own;
	char tmp[COIL_NAME_MAX + 1] = "";
	bool published = false;
	coil_obj *h = NULL;
	struct stat st;
	uint64_t done = 0;
	int rc;

	c->bytes = 0;
	c->local = false;
	/* The name is checked, and without --force found free, before a
	 * byte is copied; the rename below checks again (no-replace), so
	 * this is for an early, clear message, not for correctness. */
	rc = coil_obj_open(s, name, 0, &h);
	if (rc == 0) {
		coil_obj_close(h);
		h = NULL;
		rc = c->force ? 0 : -EEXIST;
	} else if (rc == -ENOENT) {
		rc = 0;
	}
	if (rc == 0) {
		rc = temp_create(s, name, tmp, &h);
		if (rc < 0) {
			cli_err("%s: writing object '%s' to store '%s': %s", cmd,
				name, store, cli_reason(rc));
			return rc;
		}
	}
	if (rc == -EEXIST) {
		cli_err("%s: object '%s' already exists in store '%s' (--force "
			"replaces it)", cmd, name, store);
		return rc;
	}
	if (rc < 0) {
		cli_err("%s: object '%s': %s", cmd, name,
			name_problem(rc) ? name_problem(rc) : cli_reason(rc));
		return rc;
	}
	if (!c->p)
		cli_progress_start(&own, name, fstat(fd, &st) == 0 &&
				   S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0);
	rc = put_copy(fd, h, p, &c->local, &done);
	if (!c->p)
		cli_progress_end(&own);
	/* Durable under the temporary name before it takes NAME: a power cut
	 * after the rename must not find NAME holding part of the bytes.
	 * (import leaves this and the sync after the rename to one sync at
	 * its end: the rename is journaled after every write of the
	 * temporary object and recovery replays a prefix of the journal, so
	 * NAME is whole or absent all the same.) */
	if (rc == 0 && c->sync)
		rc = coil_sync(s);
	coil_obj_close(h);
	h = NULL;
	if (rc == 0)
		rc = coil_obj_rename(s, tmp, name,
				     c->force ? 0 : COIL_RENAME_NOREPLACE);
	if (rc == 0) {
		published = true;
		if (c->sync)
			rc = coil_sync(s);
	}
	if (rc == 0) {
		c->bytes = done;
	} else if (rc == -EINTR) {
		cli_err("%s: interrupted; object '%s' left as it was", cmd, name);
	} else if (c->local) {
		cli_err("%s: cannot read '%s': %s", cmd, file, strerror(-rc));
	} else if (rc == -EEXIST) {
		cli_err("%s: object '%s' already exists in store '%s' (--force "
			"replaces it)", cmd, name, store);
	} else {
		cli_err("%s: writing object '%s' to store '%s': %s", cmd, name,
			store, cli_reason(rc));
	}
	if (rc < 0 && !published) {
		int r2 = coil_obj_remove(s, tmp);

		/* put's sync; import's last one covers its removals too. */
		if (r2 == 0 && c->sync)
			r2 = coil_sync(s);
		if (r2 < 0 && r2 != -ENOENT)
			cli_err("%s: could not remove the temporary object '%s' "
				"(remove it with 'coil rm'): %s", cmd, tmp,
				cli_reason(r2));
	}
	return rc;
}

int cmd_put(int argc, char **argv)
{
	bool force = false;
	const char *codec = NULL;
	const struct cli_opt opts[] = {
		{ "--force", 'f', NULL, &force },
		{ "--compression", 'c', &codec, NULL },
		{ 0 },
	};
	struct cli_copy c = { .cmd = "put", .sync = true };
	const char *store, *name, *file;
	char *pos[3];
	coil_store *s;
	struct stat st;
	int npos, rc, fd, ret = CLI_FAIL;

	rc = cli_parse_args("put", argc, argv, opts, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error("put", "expected STORE NAME FILE");
	store = pos[0];
	name = pos[1];
	file = pos[2];
	if (cli_codec_check("--compression", codec))
		return CLI_USAGE;
	/* The source first: a missing file must not touch the store. */
	fd = strcmp(file, "-") ? open(file, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	if (fd < 0 || fstat(fd, &st) < 0) {
		cli_err("put: cannot read '%s': %s", file, strerror(errno));
		if (fd > STDIN_FILENO)
			close(fd);
		return CLI_FAIL;
	}
	if (S_ISDIR(st.st_mode)) {
		cli_err("put: cannot read '%s': %s", file, strerror(EISDIR));
		goto out_fd;
	}
	if (cli_open_store_codec("put", store, 0, codec, &s) < 0)
		goto out_fd;
	c.store = store;
	c.force = force;
	if (cli_put_fd(s, &c, name, fd, file) == 0)
		ret = CLI_OK;
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
out_fd:
	if (fd != STDIN_FILENO)
		close(fd);
	return ret;
}

/* ---- get --------------------------------------------------------------- */

/* @return 0 or the negative errno; *@local when writing @fd failed. */
static int get_copy(coil_obj *h, int fd, struct cli_progress *p, bool *local,
		    uint64_t *done)
{
	uint8_t *buf = malloc(CLI_BUF_BYTES);
	uint64_t off = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		int64_t n = cli_interrupted ? -EINTR :
					      coil_pread(h, buf, CLI_BUF_BYTES, off);

		if (n <= 0) {
			rc = (int)n;
			break;
		}
		for (size_t done = 0; done < (size_t)n;) {
			ssize_t w = write(fd, buf + done, (size_t)n - done);

			if (w < 0 && errno == EINTR && !cli_interrupted)
				continue;
			if (w < 0) {
				rc = -errno;
				*local = true;
				break;
			}
			done += (size_t)w;
		}
		if (rc < 0)
			break;
		off += (uint64_t)n;
		cli_progress_update(p, p->base + off);
	}
	free(buf);
	*done = off;
	return rc;
}

/* A temporary name in @dest's directory: rename(2) is atomic only within
 * one file system. */
static char *temp_path_for(const char *dest)
{
	const char *slash = strrchr(dest, '/');
	size_t dlen = slash ? (size_t)(slash - dest) + 1 : 0;
	char *t = malloc(dlen + 32);

	if (t) {
		memcpy(t, dest, dlen);
		strcpy(t + dlen, ".coil-get.XXXXXX");
	}
	return t;
}

int cli_get_object(coil_store *s, struct cli_copy *c, const char *name,
		   const char *file)
{
	const char *cmd = c->cmd, *store = c->store, *dest;
	struct cli_progress own, *p = c->p ? c->p : &own;
	bool to_stdout = !strcmp(file, "-");
	char *tmp = NULL, *target = NULL;
	uint64_t size = 0, done = 0;
	struct stat st;
	coil_obj *h;
	int rc, fd;

	c->bytes = 0;
	c->local = false;
	rc = coil_obj_open(s, name, 0, &h);
	if (rc == -ENOENT) {
		cli_err("%s: no object '%s' in store '%s'", cmd, name, store);
		return rc;
	}
	if (rc < 0) {
		cli_err("%s: object '%s': %s", cmd, name,
			name_problem(rc) ? name_problem(rc) : cli_reason(rc));
		return rc;
	}
	if (to_stdout) {
		fd = STDOUT_FILENO;
	} else {
		/* Write through a symbolic link, as cp does: the file it
		 * names is replaced, the link stays.  (export replaces the
		 * link instead: it writes only under its DIR.) */
		if (!c->nofollow)
			target = realpath(file, NULL);
		tmp = temp_path_for(target ? target : file);
		fd = tmp ? mkstemp(tmp) : -1;
		if (fd < 0) {
			rc = tmp ? -errno : -ENOMEM;
			c->local = true;
			cli_err("%s: cannot write '%s': %s", cmd, file,
				strerror(-rc));
			goto out;
		}
	}
	dest = target ? target : file;
	if (!c->p) {
		coil_obj_size(h, &size);
		cli_progress_start(&own, name, size);
	}
	rc = get_copy(h, fd, p, &c->local, &done);
	if (!c->p)
		cli_progress_end(&own);
	if (rc == 0 && !to_stdout) {
		/* mkstemp made it 0600: give it the mode a new file would get,
		 * or the mode of the file it replaces. */
		mode_t mask = umask(0);
		mode_t mode = 0666 & ~mask;

		umask(mask);
		if (lstat(dest, &st) == 0 && S_ISREG(st.st_mode))
			mode = st.st_mode & 07777;
		if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
			rc = -errno;
			c->local = true;
		}
	}
	if (!to_stdout && close(fd) < 0 && rc == 0) {
		rc = -errno;
		c->local = true;
	}
	if (rc == 0 && !to_stdout && rename(tmp, dest) < 0) {
		rc = -errno;
		c->local = true;
	}
	if (rc == 0)
		c->bytes = done;
	else if (rc == -EINTR)
		cli_err("%s: interrupted; '%s' left as it was", cmd, file);
	else if (c->local)
		cli_err("%s: cannot write '%s': %s", cmd,
			to_stdout ? "stdout" : file, strerror(-rc));
	else
		cli_err("%s: reading object '%s' from store '%s': %s", cmd, name,
			store, cli_reason(rc));
	if (rc < 0 && tmp)
		unlink(tmp);
out:
	coil_obj_close(h);
	free(tmp);
	free(target);
	return rc;
}

int cmd_get(int argc, char **argv)
{
	struct cli_copy c = { .cmd = "get" };
	const char *store, *file;
	char *pos[3];
	struct stat st;
	coil_store *s;
	int npos, rc, ret = CLI_FAIL;

	rc = cli_parse_args("get", argc, argv, NULL, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error("get", "expected STORE NAME FILE");
	store = pos[0];
	file = pos[2];
	if (strcmp(file, "-") && stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
		cli_err("get: cannot write '%s': %s", file, strerror(EISDIR));
		return CLI_FAIL;
	}
	/* get replaces FILE by renaming a new file over it: a FIFO or a
	 * device there would be replaced by a regular file, not written */
	if (strcmp(file, "-") && stat(file, &st) == 0 && !S_ISREG(st.st_mode)) {
		cli_err("get: cannot write '%s': not a regular file (to write "
			"into a FIFO or a device, use - and redirect)", file);
		return CLI_FAIL;
	}
	if (cli_open_store("get", store, COIL_RDONLY, &s) < 0)
		return CLI_FAIL;
	c.store = store;
	if (cli_get_object(s, &c, pos[1], file) == 0)
		ret = CLI_OK;
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	return ret;
}
