/* tools/cli_tree.c — coil import and coil export: a directory tree into
 * objects named by the files' paths, and back.
 *
 * Each file is one copy made as put or get makes it (cli_copy.c): a failed
 * or interrupted copy leaves no object, or no file, under a real name.  A
 * problem with one file is reported and the others go on; the exit status
 * then says 1. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/cli.h"

/* "@dir/@rel" (@rel "" is @dir), without doubling a '/' that ends @dir.
 * NULL when out of memory. */
static char *join(const char *dir, const char *rel)
{
	size_t dl = strlen(dir), rl = strlen(rel);
	bool slash = rl && dl && dir[dl - 1] != '/';
	char *p = malloc(dl + slash + rl + 1);

	if (p) {
		memcpy(p, dir, dl);
		if (slash)
			p[dl] = '/';
		memcpy(p + dl + slash, rel, rl + 1);
	}
	return p;
}

/* What a file that is not regular is, for the note that skips it. */
static const char *file_kind(mode_t mode)
{
	if (S_ISLNK(mode))
		return "a symbolic link (not followed)";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	return "not a regular file";
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* ---- import -------------------------------------------------------------- */

/* The regular files under a directory, by their path relative to it. */
struct walk {
	const char *root;
	struct cli_entry *e;
	size_t n, cap;
	uint64_t bytes;
	struct stat store; /* the store's own file, when it is under root */
	bool have_store;
	bool failed;       /* something could not be read: status 1 */
	bool nomem;        /* stop */
};

static int walk_add(struct walk *w, char *rel, uint64_t size)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct cli_entry *e = realloc(w->e, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		w->e = e;
		w->cap = cap;
	}
	w->e[w->n].name = rel;
	w->e[w->n].len = strlen(rel);
	w->e[w->n].size = size;
	w->n++;
	w->bytes += size;
	return 0;
}

/* Walk the directory @rel ("" for root) and, after it is closed, its
 * subdirectories: one directory stream open at a time, however deep the
 * tree.  lstat, so a symbolic link is seen as one and never followed. */
static void walk_dir(struct walk *w, const char *rel)
{
	char *path = join(w->root, rel), **sub = NULL;
	size_t nsub = 0, capsub = 0;
	struct dirent *de;
	DIR *d;

	if (!path) {
		w->nomem = true;
		return;
	}
	d = opendir(path);
	if (!d) {
		cli_err("import: cannot read '%s': %s", path, strerror(errno));
		w->failed = true;
		free(path);
		return;
	}
	for (;;) {
		char *child, *cpath;
		struct stat st;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno) {
				cli_err("import: cannot read '%s': %s", path,
					strerror(errno));
				w->failed = true;
			}
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		child = join(rel, de->d_name);
		cpath = child ? join(w->root, child) : NULL;
		if (!cpath) {
			free(child);
			w->nomem = true;
			break;
		}
		if (lstat(cpath, &st) < 0) {
			cli_err("import: cannot read '%s': %s", cpath,
				strerror(errno));
			w->failed = true;
			free(child);
		} else if (S_ISDIR(st.st_mode)) {
			if (nsub == capsub) {
				size_t cap = capsub ? capsub * 2 : 16;
				char **s = realloc(sub, cap * sizeof(*s));

				if (!s) {
					free(child);
					free(cpath);
					w->nomem = true;
					break;
				}
				sub = s;
				capsub = cap;
			}
			sub[nsub++] = child;
		} else if (!S_ISREG(st.st_mode)) {
			cli_err("import: skipping '%s': %s", cpath,
				file_kind(st.st_mode));
			free(child);
		} else if (w->have_store && same_file(&st, &w->store)) {
			/* It would copy itself while it changes. */
			cli_err("import: skipping '%s': the store itself", cpath);
			free(child);
		} else if (walk_add(w, child, (uint64_t)st.st_size) < 0) {
			free(child);
			free(cpath);
			w->nomem = true;
			break;
		}
		free(cpath);
	}
	closedir(d);
	free(path);
	for (size_t i = 0; i < nsub; i++) {
		if (!w->nomem)
			walk_dir(w, sub[i]);
		free(sub[i]);
	}
	free(sub);
}

static int name_cmp(const void *x, const void *y)
{
	const struct cli_entry *a = x, *b = y;

	return strcmp(a->name, b->name);
}

/* Import the file @e names under @dir.  @return 0, or the negative errno
 * (reported). */
static int import_one(coil_store *s, struct cli_copy *c, const char *dir,
		      const struct cli_entry *e)
{
	char *path = join(dir, e->name);
	struct stat st;
	int fd, rc;

	/* Until cli_put_fd runs, a failure is the file's. */
	c->local = true;
	if (!path) {
		cli_err("import: out of memory");
		return -ENOMEM;
	}
	if (e->len > COIL_NAME_MAX) {
		cli_err("import: cannot import '%s': its name is %zu bytes, an "
			"object's is at most %d", path, e->len, COIL_NAME_MAX);
		free(path);
		return -ENAMETOOLONG;
	}
	/* O_NOFOLLOW and O_NONBLOCK: a file replaced since the walk by a
	 * link or a FIFO is neither followed nor waited on. */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		cli_err("import: cannot read '%s': %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		cli_err("import: cannot import '%s': %s (it changed since the "
			"directory was read)", path, file_kind(st.st_mode));
	} else {
		rc = cli_put_fd(s, c, e->name, fd, path);
	}
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

int cmd_import(int argc, char **argv)
{
	bool force = false;
	const char *codec = NULL;
	const struct cli_opt opts[] = {
		{ "--force", 'f', NULL, &force },
		{ "--compression", 'c', &codec, NULL },
		{ 0 },
	};
	struct walk w = { 0 };
	struct cli_progress p;
	struct cli_copy c = { .cmd = "import", .p = &p };
	const char *store, *dir;
	uint64_t files = 0, bytes = 0;
	char *pos[2];
	struct stat st;
	coil_store *s;
	int npos, rc, ret = CLI_OK;

	rc = cli_parse_args("import", argc, argv, opts, pos, 2, &npos);
	if (rc)
		return rc;
	if (npos != 2)
		return cli_usage_error("import", "expected STORE DIR");
	store = pos[0];
	dir = pos[1];
	if (cli_codec_check("--compression", codec))
		return CLI_USAGE;
	/* The source first, as for put: a missing DIR must not touch the
	 * store. */
	if (stat(dir, &st) < 0) {
		cli_err("import: cannot read '%s': %s", dir, strerror(errno));
		return CLI_FAIL;
	}
	if (!S_ISDIR(st.st_mode)) {
		cli_err("import: cannot read '%s': %s", dir, strerror(ENOTDIR));
		return CLI_FAIL;
	}
	if (cli_open_store_codec("import", store, 0, codec, &s) < 0)
		return CLI_FAIL;
	w.root = dir;
	w.have_store = stat(store, &w.store) == 0;
	walk_dir(&w, "");
	if (w.nomem) {
		cli_err("import: out of memory");
		ret = CLI_FAIL;
		goto out;
	}
	if (w.failed)
		ret = CLI_FAIL;
	/* Name order: the order ls shows, and the same on every run. */
	if (w.n)
		qsort(w.e, w.n, sizeof(*w.e), name_cmp);

	c.store = store;
	c.force = force;
	cli_progress_start(&p, "import", w.bytes);
	p.unit = "files";
	p.nitems = w.n;
	for (size_t i = 0; i < w.n; i++) {
		if (cli_interrupted) {
			cli_err("import: interrupted; %zu files not imported",
				w.n - i);
			ret = CLI_FAIL;
			break;
		}
		rc = import_one(s, &c, dir, &w.e[i]);
		p.items++;
		p.base += rc == 0 ? c.bytes : w.e[i].size;
		cli_progress_update(&p, p.base);
		if (rc == 0) {
			files++;
			bytes += c.bytes;
			continue;
		}
		ret = CLI_FAIL;
		/* The copy said so; the objects already imported stay. */
		if (rc == -EINTR || rc == -ENOMEM)
			break;
		/* A store that failed a write accepts no more: one message,
		 * not one per file left. */
		if (rc == -EIO && !c.local) {
			cli_err("import: stopped; %zu files not imported",
				w.n - i - 1);
			break;
		}
	}
	cli_progress_end(&p);
	/* One sync for every file: each was renamed onto its name after its
	 * last write, and recovery keeps a prefix of that order, so a crash
	 * before here loses whole files, never part of one. */
	rc = coil_sync(s);
	if (rc < 0) {
		cli_err("import: sync '%s': %s", store, cli_reason(rc));
		ret = CLI_FAIL;
	}
	printf("imported %llu files, %llu bytes (logical) from %s\n",
	       (unsigned long long)files, (unsigned long long)bytes, dir);
	if (fflush(stdout) != 0) {
		cli_err("import: writing the summary: %s", strerror(errno));
		ret = CLI_FAIL;
	}
out:
	cli_list_free(w.e, w.n);
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	return ret;
}

/* ---- export -------------------------------------------------------------- */

/* Why the object @name may not become a file under DIR, or NULL.  Only
 * names that stay inside DIR and name one file there are written. */
static const char *unsafe_name(const char *name)
{
	if (name[0] == '/')
		return "an absolute name (it would be written outside the "
		       "directory)";
	for (const char *p = name;; p++) {
		size_t n = strcspn(p, "/");

		if (n == 0)
			return "an empty component ('//' or a '/' at its end)";
		if (n == 2 && !memcmp(p, "..", 2))
			return "a '..' component (it would be written outside "
			       "the directory)";
		if (n == 1 && p[0] == '.')
			return "a '.' component";
		p += n;
		if (!*p)
			return NULL;
	}
}

/* mkdir -p @path (a user's own DIR: links in it are followed). */
static int mkdir_p(char *path)
{
	struct stat st;

	if (!*path)
		return -ENOENT;
	for (char *p = path + 1;; p++) {
		char c = *p;

		if (c != '/' && c)
			continue;
		*p = 0;
		if (mkdir(path, 0777) < 0 && errno != EEXIST) {
			*p = c;
			return -errno;
		}
		*p = c;
		if (!c)
			break;
	}
	if (stat(path, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Make the directories of @path from the @from'th byte on (the object's
 * name; before it is DIR), one component at a time.  lstat: a symbolic
 * link found under DIR is refused, not followed out of it. */
static int make_parents(char *path, size_t from)
{
	for (char *p = path + from; (p = strchr(p, '/')); p++) {
		struct stat st;
		int rc = 0;

		*p = 0;
		if (mkdir(path, 0777) < 0 && errno != EEXIST)
			rc = -errno;
		else if (lstat(path, &st) < 0)
			rc = -errno;
		if (rc < 0)
			cli_err("export: cannot make directory '%s': %s", path,
				strerror(-rc));
		*p = '/';
		if (rc < 0)
			return rc;
		if (!S_ISDIR(st.st_mode)) {
			cli_err("export: cannot write '%s': '%.*s' is %s", path,
				(int)(p - path), path, S_ISLNK(st.st_mode) ?
				"a symbolic link (not followed)" :
				"not a directory");
			return -ENOTDIR;
		}
	}
	return 0;
}

int cmd_export(int argc, char **argv)
{
	struct cli_progress p;
	struct cli_copy c = { .cmd = "export", .p = &p, .nofollow = true };
	struct cli_entry *e = NULL;
	struct stat self, st;
	const char *store;
	uint64_t objects = 0, bytes = 0, total = 0;
	char *pos[2], *dir = NULL;
	bool have_self;
	coil_store *s;
	size_t n = 0;
	int npos, rc, ret = CLI_OK;

	rc = cli_parse_args("export", argc, argv, NULL, pos, 2, &npos);
	if (rc)
		return rc;
	if (npos != 2)
		return cli_usage_error("export", "expected STORE DIR");
	store = pos[0];
	if (cli_open_store("export", store, COIL_RDONLY, &s) < 0)
		return CLI_FAIL;
	rc = cli_list_sorted(s, &e, &n);
	if (rc < 0) {
		cli_err("export '%s': %s", store, cli_reason(rc));
		ret = CLI_FAIL;
		goto out;
	}
	dir = strdup(pos[1]);
	rc = dir ? mkdir_p(dir) : -ENOMEM;
	if (rc < 0) {
		cli_err("export: cannot make directory '%s': %s", pos[1],
			strerror(-rc));
		ret = CLI_FAIL;
		goto out;
	}
	have_self = stat(store, &self) == 0;
	for (size_t i = 0; i < n; i++)
		total += e[i].size;

	c.store = store;
	cli_progress_start(&p, "export", total);
	p.unit = "objects";
	p.nitems = n;
	for (size_t i = 0; i < n; i++) {
		const char *why = unsafe_name(e[i].name);
		char *path = NULL;

		if (cli_interrupted) {
			cli_err("export: interrupted; %zu objects not exported",
				n - i);
			ret = CLI_FAIL;
			break;
		}
		rc = 0;
		if (why) {
			cli_err("export: skipping object '%s': %s", e[i].name, why);
			rc = -EINVAL;
		}
		if (rc == 0) {
			path = join(dir, e[i].name);
			rc = path ? make_parents(path, strlen(path) - e[i].len) :
				    -ENOMEM;
		}
		/* Renamed over, the store's own file would be lost to the
		 * objects it holds (DIR may be where the store is). */
		if (rc == 0 && have_self && lstat(path, &st) == 0 &&
		    same_file(&st, &self)) {
			cli_err("export: skipping object '%s': its file '%s' is "
				"the store itself", e[i].name, path);
			rc = -EEXIST;
		}
		if (rc == 0)
			rc = cli_get_object(s, &c, e[i].name, path);
		if (rc == -ENOMEM && !path)
			cli_err("export: out of memory");
		free(path);
		p.items++;
		p.base += rc == 0 ? c.bytes : e[i].size;
		cli_progress_update(&p, p.base);
		if (rc == 0) {
			objects++;
			bytes += c.bytes;
			continue;
		}
		ret = CLI_FAIL;
		if (rc == -EINTR || rc == -ENOMEM)
			break;
	}
	cli_progress_end(&p);
	printf("exported %llu objects, %llu bytes to %s\n",
	       (unsigned long long)objects, (unsigned long long)bytes, pos[1]);
	if (fflush(stdout) != 0) {
		cli_err("export: writing the summary: %s", strerror(errno));
		ret = CLI_FAIL;
	}
out:
	free(dir);
	cli_list_free(e, n);
	if (cli_close_store(store, s) < 0)
		ret = CLI_FAIL;
	return ret;
}
