/* suite_init.c — linked into SQLite's own `testfixture` by
 * `tools/dev.sh sqlite-suite` and named by -DSQLITE_EXTRA_INIT, so SQLite's
 * TCL suite runs on the coil VFS with SQLite's code unchanged.
 *
 * sqlite3_initialize() calls coil_suite_init() after every real
 * initialisation.  With COIL_SUITE_EXT unset it does nothing (the same
 * binary runs the default-VFS column).  Set, it loads that
 * libcoil_sqlite.so as an extension once — the VFS then calls this very
 * copy of SQLite through the routine table — and makes "coil" the default
 * VFS.  A test that calls sqlite3_shutdown() re-initialises the OS layer,
 * which makes "unix" the default again; the next initialisation gets here
 * again and puts "coil" back.
 *
 * It also registers the static Tcl package "Coilsuite"
 * (tests/sqlite/suite_prelude.tcl loads it): the test scripts delete, test
 * and size their database files with Tcl's `file`, which on coil reaches
 * host files that do not exist; the prelude sends those names to the coil
 * VFS too, so a script that resets its database really gets a new one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <tcl.h>

/* The coil VFS and @name made canonical by it in @full (mxPathname + 1
 * bytes), or NULL when coil is not loaded. */
static sqlite3_vfs *coil_name(const char *name, char *full, int n)
{
	sqlite3_vfs *vfs = sqlite3_vfs_find("coil");

	if (!vfs || n <= vfs->mxPathname ||
	    vfs->xFullPathname(vfs, name, vfs->mxPathname + 1, full) != SQLITE_OK)
		return NULL;
	return vfs;
}

/* coil_suite_delete NAME: remove the object, if any (never an error). */
static int cmd_delete(ClientData cd, Tcl_Interp *interp, int objc,
		      Tcl_Obj *const objv[])
{
	char full[1024];
	sqlite3_vfs *vfs;

	(void)cd;
	if (objc != 2) {
		Tcl_WrongNumArgs(interp, 1, objv, "NAME");
		return TCL_ERROR;
	}
	vfs = coil_name(Tcl_GetString(objv[1]), full, sizeof(full));
	if (vfs)
		vfs->xDelete(vfs, full, 0);
	return TCL_OK;
}

/* coil_suite_size NAME: the object's size, -1 when it does not exist (or
 * coil is not loaded). */
static int cmd_size(ClientData cd, Tcl_Interp *interp, int objc,
		    Tcl_Obj *const objv[])
{
	char full[1024];
	sqlite3_vfs *vfs;
	sqlite3_int64 size = -1;

	(void)cd;
	if (objc != 2) {
		Tcl_WrongNumArgs(interp, 1, objv, "NAME");
		return TCL_ERROR;
	}
	vfs = coil_name(Tcl_GetString(objv[1]), full, sizeof(full));
	if (vfs) {
		sqlite3_file *f = calloc(1, (size_t)vfs->szOsFile);
		int out = 0;

		/* A super-journal open: no URI parameters are read from the
		 * name, and without SQLITE_OPEN_CREATE nothing is made. */
		if (f && vfs->xOpen(vfs, full, f, SQLITE_OPEN_SUPER_JOURNAL |
				    SQLITE_OPEN_READONLY, &out) == SQLITE_OK) {
			if (f->pMethods->xFileSize(f, &size) != SQLITE_OK)
				size = -1;
			f->pMethods->xClose(f);
		}
		free(f);
	}
	Tcl_SetObjResult(interp, Tcl_NewWideIntObj(size));
	return TCL_OK;
}

/* coil_suite_active: 1 when coil is the VFS under test. */
static int cmd_active(ClientData cd, Tcl_Interp *interp, int objc,
		      Tcl_Obj *const objv[])
{
	(void)cd;
	(void)objc;
	(void)objv;
	Tcl_SetObjResult(interp, Tcl_NewIntObj(sqlite3_vfs_find("coil") != NULL));
	return TCL_OK;
}

int Coilsuite_Init(Tcl_Interp *interp);

int Coilsuite_Init(Tcl_Interp *interp)
{
	Tcl_CreateObjCommand(interp, "coil_suite_delete", cmd_delete, NULL, NULL);
	Tcl_CreateObjCommand(interp, "coil_suite_size", cmd_size, NULL, NULL);
	Tcl_CreateObjCommand(interp, "coil_suite_active", cmd_active, NULL, NULL);
	return TCL_OK;
}

int coil_suite_init(const char *unused);

int coil_suite_init(const char *unused)
{
	static int loaded, registered;
	const char *ext = getenv("COIL_SUITE_EXT");
	sqlite3_vfs *vfs;

	(void)unused;
	if (!registered) {
		Tcl_StaticPackage(NULL, "Coilsuite", Coilsuite_Init, NULL);
		registered = 1;
	}
	if (!ext || !*ext)
		return SQLITE_OK;
	if (!loaded) {
		sqlite3 *db = NULL;
		char *err = NULL;
		int rc;

		/* isInit is already set when this runs: opening here does not
		 * recurse into initialisation. */
		rc = sqlite3_open(":memory:", &db);
		if (rc == SQLITE_OK)
			rc = sqlite3_enable_load_extension(db, 1);
		if (rc == SQLITE_OK)
			rc = sqlite3_load_extension(db, ext, NULL, &err);
		if (rc != SQLITE_OK) {
			fprintf(stderr, "coil_suite_init: loading %s: %s\n",
				ext, err ? err : sqlite3_errstr(rc));
			sqlite3_free(err);
			sqlite3_close(db);
			return rc;
		}
		sqlite3_close(db);
		loaded = 1;
	}
	vfs = sqlite3_vfs_find("coil");
	if (!vfs) {
		fprintf(stderr, "coil_suite_init: no \"coil\" VFS after loading %s\n",
			ext);
		return SQLITE_ERROR;
	}
	return sqlite3_vfs_register(vfs, 1);
}
