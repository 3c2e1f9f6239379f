/* coil — the command-line tool for a coil store (uses only coil.h).
 *
 *   coil create STORE SIZE [COMPRESSION]   make a new store (SIZE: 64M, 2G...)
 *   coil ls STORE                           list objects and sizes
 *   coil stats STORE                        the store's stats JSON
 *   coil put STORE NAME FILE                copy FILE ("-" = stdin) into NAME
 *   coil get STORE NAME FILE                copy NAME into FILE ("-" = stdout)
 *   coil rm STORE NAME                      remove an object
 *   coil check STORE                        read and verify every object byte
 *
 * Exit status: 0 ok, 1 failure (message on stderr), 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"

#define BUF (4u << 20)

static int die(const char *what, int rc)
{
	fprintf(stderr, "coil: %s: %s\n", what, coil_strerror(rc));
	return 1;
}

static int open_store(const char *path, unsigned flags, coil_store **s,
		      uint64_t size, const char *comp)
{
	struct coil_options o;
	int rc;

	coil_options_init(&o);
	o.flags = flags;
	if (size)
		o.size = size;
	if (comp)
		o.compression = comp;
	rc = coil_open(path, &o, s);
	if (rc == -EINVAL && !(flags & COIL_NO_DIRECT)) {
		/* The filesystem may not do O_DIRECT (tmpfs). */
		o.flags |= COIL_NO_DIRECT;
		rc = coil_open(path, &o, s);
	}
	return rc;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	case 't': case 'T': v <<= 40; break;
	case 0: break;
	default: return 0;
	}
	return v;
}

static int ls_cb(void *arg, const char *name, size_t len, uint64_t size)
{
	(void)arg;
	printf("%12llu  %.*s\n", (unsigned long long)size, (int)len, name);
	return 0;
}

struct check {
	coil_store *s;
	uint8_t *buf;
	uint64_t objects, bytes, bad_ranges;
};

static int check_cb(void *arg, const char *name, size_t len, uint64_t size)
{
	struct check *c = arg;
	coil_obj *h;
	int rc = coil_obj_open(c->s, name, 0, &h);

	(void)len;
	if (rc < 0) {
		fprintf(stderr, "coil: check: open %s: %s\n", name, coil_strerror(rc));
		c->bad_ranges++;
		return 0;
	}
	for (uint64_t off = 0; off < size; off += BUF) {
		int64_t n = coil_pread(h, c->buf, BUF, off);
		if (n < 0) {
			/* Narrow the failure down to 64 KiB pieces. */
			for (uint64_t o = off; o < off + BUF && o < size; o += 65536) {
				int64_t m = coil_pread(h, c->buf, 65536, o);
				if (m < 0) {
					fprintf(stderr, "coil: check: %s [%llu, +64K): %s\n",
						name, (unsigned long long)o,
						coil_strerror((int)m));
					c->bad_ranges++;
				}
			}
			continue;
		}
		c->bytes += (uint64_t)n;
	}
	c->objects++;
	coil_obj_close(h);
	return 0;
}

static int copy_in(coil_store *s, const char *name, const char *file)
{
	int fd = strcmp(file, "-") ? open(file, O_RDONLY) : 0;
	uint8_t *buf = malloc(BUF);
	uint64_t off = 0;
	coil_obj *h;
	int rc;

	if (fd < 0 || !buf) {
		free(buf);
		return die(file, fd < 0 ? -errno : -ENOMEM);
	}
	rc = coil_obj_open(s, name, COIL_CREATE, &h);
	if (rc < 0)
		return die("open object", rc);
	rc = coil_obj_truncate(h, 0);
	for (; rc == 0;) {
		ssize_t n = read(fd, buf, BUF);
		int64_t w;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		w = coil_pwrite(h, buf, (size_t)n, off);
		if (w < 0)
			rc = (int)w;
		off += (uint64_t)n;
	}
	if (rc == 0)
		rc = coil_sync(s);
	coil_obj_close(h);
	if (fd)
		close(fd);
	free(buf);
	return rc < 0 ? die("put", rc) : 0;
}

static int copy_out(coil_store *s, const char *name, const char *file)
{
	int fd = strcmp(file, "-") ? open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644) : 1;
	uint8_t *buf = malloc(BUF);
	uint64_t off = 0;
	coil_obj *h;
	int rc;

	if (fd < 0 || !buf) {
		free(buf);
		return die(file, fd < 0 ? -errno : -ENOMEM);
	}
	rc = coil_obj_open(s, name, 0, &h);
	if (rc < 0)
		return die("open object", rc);
	for (;;) {
		int64_t n = coil_pread(h, buf, BUF, off);
		if (n <= 0) {
			rc = (int)n;
			break;
		}
		if (write(fd, buf, (size_t)n) != n) {
			rc = -errno;
			break;
		}
		off += (uint64_t)n;
	}
	coil_obj_close(h);
	if (fd != 1)
		close(fd);
	free(buf);
	return rc < 0 ? die("get", rc) : 0;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: coil create STORE SIZE [none|zstd|zstd:N]\n"
		"       coil ls STORE\n"
		"       coil stats STORE\n"
		"       coil put STORE NAME FILE\n"
		"       coil get STORE NAME FILE\n"
		"       coil rm STORE NAME\n"
		"       coil check STORE\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	coil_store *s;
	int rc, ret = 0;

	if (argc < 3)
		return usage();
	if (!strcmp(cmd, "create")) {
		uint64_t size = argc > 3 ? parse_size(argv[3]) : 0;
		if (!size)
			return usage();
		if (access(argv[2], F_OK) == 0) {
			fprintf(stderr, "coil: %s exists\n", argv[2]);
			return 1;
		}
		rc = open_store(argv[2], COIL_CREATE, &s, size,
				argc > 4 ? argv[4] : NULL);
		if (rc < 0)
			return die("create", rc);
		return coil_close(s) < 0;
	}
	rc = open_store(argv[2], (!strcmp(cmd, "ls") || !strcmp(cmd, "stats") ||
				  !strcmp(cmd, "get") || !strcmp(cmd, "check")) ?
					 COIL_RDONLY : 0, &s, 0, NULL);
	if (rc < 0)
		return die(argv[2], rc);
	if (!strcmp(cmd, "ls")) {
		rc = coil_obj_list(s, ls_cb, NULL);
		if (rc < 0)
			ret = die("ls", rc);
	} else if (!strcmp(cmd, "stats")) {
		int n = coil_stats_json(s, NULL, 0);
		char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
		if (n < 0 || !buf)
			ret = die("stats", n < 0 ? n : -ENOMEM);
		else {
			coil_stats_json(s, buf, (size_t)n + 1);
			printf("%s\n", buf);
		}
		free(buf);
	} else if (!strcmp(cmd, "put") && argc == 5) {
		ret = copy_in(s, argv[3], argv[4]);
	} else if (!strcmp(cmd, "get") && argc == 5) {
		ret = copy_out(s, argv[3], argv[4]);
	} else if (!strcmp(cmd, "rm") && argc == 4) {
		rc = coil_obj_remove(s, argv[3]);
		if (rc < 0)
			ret = die("rm", rc);
	} else if (!strcmp(cmd, "check")) {
		struct check c = { .s = s, .buf = malloc(BUF) };
		if (!c.buf) {
			ret = die("check", -ENOMEM);
		} else {
			rc = coil_obj_list(s, check_cb, &c);
			printf("checked %llu objects, %llu bytes, %llu bad ranges\n",
			       (unsigned long long)c.objects,
			       (unsigned long long)c.bytes,
			       (unsigned long long)c.bad_ranges);
			ret = (rc < 0 || c.bad_ranges) ? 1 : 0;
			free(c.buf);
		}
	} else {
		ret = usage();
	}
	rc = coil_close(s);
	if (rc < 0 && !ret)
		ret = die("close", rc);
	return ret;
}
