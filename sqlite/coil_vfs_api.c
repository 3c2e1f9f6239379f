/* The SQLite entry points the VFS calls, bound directly to the libsqlite3
 * this library links.  The VFS itself calls SQLite only through the
 * extension routine table (sqlite3ext.h), so that when a host with its own
 * copy of SQLite loads it with .load, every call goes to that copy; a program
 * that links both libraries instead calls coil_sqlite_register(), which hands
 * the VFS this table.  Only the members coil_vfs.c uses are filled. */
#define SQLITE_CORE 1 /* sqlite3ext.h: declare the table, no call macros */
#include <sqlite3ext.h>

#include "coil_vfs_internal.h"

static const sqlite3_api_routines direct_api = {
	.vfs_find = sqlite3_vfs_find,
	.vfs_register = sqlite3_vfs_register,
	.uri_parameter = sqlite3_uri_parameter,
	.filename_journal = sqlite3_filename_journal,
	.filename_wal = sqlite3_filename_wal,
	.mprintf = sqlite3_mprintf,
	.log = sqlite3_log,
};

const sqlite3_api_routines *coil_vfs_direct_api(void)
{
	return &direct_api;
}
