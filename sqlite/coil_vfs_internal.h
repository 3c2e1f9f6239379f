/* Private to sqlite/: shared between coil_vfs.c and coil_vfs_api.c. */
#ifndef COIL_VFS_INTERNAL_H
#define COIL_VFS_INTERNAL_H

/* sqlite3_api_routines, with only the members coil_vfs.c calls set, bound
 * to the libsqlite3 this library links. */
const sqlite3_api_routines *coil_vfs_direct_api(void);

#endif
