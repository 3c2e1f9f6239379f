/* tools/cli_copy.c — coil put and coil get: copies between a file and an
 * object that leave nothing half made behind when they fail.
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

/* Copy @fd into @h from offset 0.  @return 0, or the negative errno with
 * *@local set when reading @fd failed (not the store). */
static int put_copy(int fd, coil_obj *h, const char *what, uint64_t total,
		    bool *local)
{
	uint8_t *buf = malloc(CLI_BUF_BYTES);
	struct cli_progress p;
	uint64_t off = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	cli_progress_start(&p, what, total);
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
		cli_progress_update(&p, off);
	}
	cli_progress_end(&p);
	free(buf);
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

int cmd_put(int argc, char **argv)
{
	bool force = false, local = false, published = false;
	const char *codec = NULL;
	const struct cli_opt opts[] = {
		{ "--force", 'f', NULL, &force },
		{ "--compression", 'c', &codec, NULL },
		{ 0 },
	};
	const char *store, *name, *file;
	char *pos[3], tmp[COIL_NAME_MAX + 1] = "";
	coil_store *s;
	coil_obj *h = NULL;
	struct stat st;
	uint64_t total = 0;
	int npos, rc, fd, ret = CLI_FAIL;

	rc = cli_parse_args("put", argc, argv, opts, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error("put", "expected STORE NAME FILE");
	store = pos[0];
	name = pos[1];
	file = pos[2];
	if (codec && !cli_codec_ok(codec)) {
		cli_err("--compression '%s': unknown codec (use none, zstd or "
			"zstd:1..19)", codec);
		return CLI_USAGE;
	}
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
	if (S_ISREG(st.st_mode))
		total = (uint64_t)st.st_size;
	if (cli_open_store_codec("put", store, 0, codec, &s) < 0)
		goto out_fd;

	/* The name is checked, and without --force found free, before a
	 * byte is copied; the rename below checks again (no-replace), so
	 * this is for an early, clear message, not for correctness. */
	rc = coil_obj_open(s, name, 0, &h);
	if (rc == 0) {
		coil_obj_close(h);
		h = NULL;
		rc = force ? 0 : -EEXIST;
	} else if (rc == -ENOENT) {
		rc = 0;
	}
	if (rc == 0) {
		rc = temp_create(s, name, tmp, &h);
		if (rc < 0) {
			cli_err("put: writing object '%s' to store '%s': %s",
				name, store, cli_reason(rc));
			goto out_store;
		}
	}
	if (rc == -EEXIST) {
		cli_err("put: object '%s' already exists in store '%s' (--force "
			"replaces it)", name, store);
		goto out_store;
	}
	if (rc < 0) {
		cli_err("put: object '%s': %s", name,
			name_problem(rc) ? name_problem(rc) : cli_reason(rc));
		goto out_store;
	}
	rc = put_copy(fd, h, name, total, &local);
	/* Durable under the temporary name before it takes NAME: a power cut
	 * after the rename must not find NAME holding part of the bytes. */
	if (rc == 0)
		rc = coil_sync(s);
	coil_obj_close(h);
	h = NULL;
	if (rc == 0)
		rc = coil_obj_rename(s, tmp, name,
				     force ? 0 : COIL_RENAME_NOREPLACE);
	if (rc == 0) {
		published = true;
		rc = coil_sync(s);
	}
	if (rc == 0) {
		ret = CLI_OK;
	} else if (rc == -EINTR) {
		cli_err("put: interrupted; object '%s' left as it was", name);
	} else if (local) {
		cli_err("put: cannot read '%s': %s", file, strerror(-rc));
	} else if (rc == -EEXIST) {
		cli_err("put: object '%s' already exists in store '%s' (--force "
			"replaces it)", name, store);
	} else {
		cli_err("put: writing object '%s' to store '%s': %s", name, store,
			cli_reason(rc));
	}
out_store:
	if (h)
		coil_obj_close(h);
	if (ret != CLI_OK && tmp[0] && !published) {
		int r2 = coil_obj_remove(s, tmp);

		if (r2 == 0)
			r2 = coil_sync(s);
		if (r2 < 0 && r2 != -ENOENT)
			cli_err("put: could not remove the temporary object '%s' "
				"(remove it with 'coil rm'): %s", tmp,
				cli_reason(r2));
	}
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
out_fd:
	if (fd != STDIN_FILENO)
		close(fd);
	return ret;
}

/* ---- get --------------------------------------------------------------- */

/* @return 0 or the negative errno; *@local when writing @fd failed. */
static int get_copy(coil_obj *h, int fd, const char *what, bool *local)
{
	uint8_t *buf = malloc(CLI_BUF_BYTES);
	struct cli_progress p;
	uint64_t off = 0, size = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	coil_obj_size(h, &size);
	cli_progress_start(&p, what, size);
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
		cli_progress_update(&p, off);
	}
	cli_progress_end(&p);
	free(buf);
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

int cmd_get(int argc, char **argv)
{
	const char *store, *name, *file;
	char *pos[3], *tmp = NULL, *target = NULL;
	bool to_stdout, local = false;
	struct stat st;
	coil_store *s;
	coil_obj *h;
	int npos, rc, fd = -1, ret = CLI_FAIL;

	rc = cli_parse_args("get", argc, argv, NULL, pos, 3, &npos);
	if (rc)
		return rc;
	if (npos != 3)
		return cli_usage_error("get", "expected STORE NAME FILE");
	store = pos[0];
	name = pos[1];
	file = pos[2];
	to_stdout = !strcmp(file, "-");
	if (!to_stdout && stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
		cli_err("get: cannot write '%s': %s", file, strerror(EISDIR));
		return CLI_FAIL;
	}
	if (cli_open_store("get", store, COIL_RDONLY, &s) < 0)
		return CLI_FAIL;
	rc = coil_obj_open(s, name, 0, &h);
	if (rc == -ENOENT) {
		cli_err("get: no object '%s' in store '%s'", name, store);
		goto out_store;
	}
	if (rc < 0) {
		cli_err("get: object '%s': %s", name,
			name_problem(rc) ? name_problem(rc) : cli_reason(rc));
		goto out_store;
	}
	if (to_stdout) {
		fd = STDOUT_FILENO;
	} else {
		/* Write through a symbolic link, as cp does: the file it
		 * names is replaced, the link stays. */
		target = realpath(file, NULL);
		tmp = temp_path_for(target ? target : file);
		fd = tmp ? mkstemp(tmp) : -1;
		if (fd < 0) {
			cli_err("get: cannot write '%s': %s", file,
				strerror(tmp ? errno : ENOMEM));
			goto out_obj;
		}
	}
	rc = get_copy(h, fd, name, &local);
	if (rc == 0 && !to_stdout) {
		/* mkstemp made it 0600: give it the mode a new file would get,
		 * or the mode of the file it replaces. */
		mode_t mask = umask(0);
		mode_t mode = 0666 & ~mask;

		umask(mask);
		if (target && stat(target, &st) == 0)
			mode = st.st_mode & 07777;
		if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
			rc = -errno;
			local = true;
		}
	}
	if (!to_stdout && close(fd) < 0 && rc == 0) {
		rc = -errno;
		local = true;
	}
	if (rc == 0 && !to_stdout && rename(tmp, target ? target : file) < 0) {
		rc = -errno;
		local = true;
	}
	if (rc == 0)
		ret = CLI_OK;
	else if (rc == -EINTR)
		cli_err("get: interrupted; '%s' left as it was", file);
	else if (local)
		cli_err("get: cannot write '%s': %s", to_stdout ? "stdout" : file,
			strerror(-rc));
	else
		cli_err("get: reading object '%s' from store '%s': %s", name,
			store, cli_reason(rc));
	if (rc < 0 && tmp)
		unlink(tmp);
out_obj:
	coil_obj_close(h);
out_store:
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	free(tmp);
	free(target);
	return ret;
}
