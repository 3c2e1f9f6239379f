/* coil_vfs.h — the coil SQLite VFS, for programs that link both libsqlite3
 * and libcoil_sqlite (the same library the sqlite3 shell loads with .load).
 *
 * The VFS is named "coil".  Each database, rollback journal, WAL and super
 * journal is a coil object named by its canonical absolute path (taken
 * from the working directory when relative; ".", ".." and repeated slashes
 * resolved), as the default VFS names files.  Temporary
 * files (temp databases, statement journals) stay on the default VFS.
 *
 * Which store a database lives in, first match wins:
 *   1. the URI parameter  coil_store=PATH  (file:db?vfs=coil&coil_store=...)
 *   2. the @store_path given to coil_sqlite_register()
 *   3. the environment variable COIL_STORE
 * A missing store is created with COIL_STORE_SIZE bytes (default 1 GiB; the
 * file is sparse, so only what is written takes space).  COIL_COMPRESSION
 * ("none", "zstd", "zstd:N") sets the codec of a store opened by the VFS.
 */
#ifndef COIL_VFS_H
#define COIL_VFS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COIL_SQLITE_API __attribute__((visibility("default")))
#else
#define COIL_SQLITE_API
#endif

/* Register the "coil" VFS with the SQLite this program links.
 * @store_path: default store for databases opened without a coil_store URI
 *   parameter; NULL keeps the COIL_STORE environment variable as default.
 *   Copied; need only live during the call.
 * @make_default: nonzero makes "coil" the default VFS of the process.
 * Calling it again replaces the default store path (open databases keep
 * theirs).
 * @return an SQLite result code: SQLITE_OK, SQLITE_NOMEM, SQLITE_ERROR. */
COIL_SQLITE_API int coil_sqlite_register(const char *store_path,
                                         int make_default);

#ifdef __cplusplus
}
#endif
#endif /* COIL_VFS_H */
