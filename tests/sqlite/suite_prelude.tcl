# suite_prelude.tcl — runs one file of SQLite's TCL suite
# (tests/sqlite/suite.py): testfixture suite_prelude.tcl FILE.test
#
# SQLite's scripts reset and inspect their databases with Tcl's `file`
# (forcedelete is `file delete`, and `file exists` / `file size` check
# journals and database sizes).  On the coil VFS those names are objects in
# the store, not host files, so `file delete`, `file exists` and `file size`
# also reach the object of the same name through the VFS (the Coilsuite
# package of suite_init.c).  With the default VFS nothing changes.
set argv0 [lindex $argv 0]
set argv [lrange $argv 1 end]
set argc [llength $argv]

sqlite3_initialize
load {} Coilsuite

if {[coil_suite_active]} {
  rename file ::coil_suite_host_file
  proc file {cmd args} {
    switch -- $cmd {
      delete {
        set r [uplevel 1 [list ::coil_suite_host_file delete {*}$args]]
        set opts 1
        foreach a $args {
          if {$opts && $a eq "--"} { set opts 0; continue }
          if {$opts && [string match -* $a]} continue
          set opts 0
          coil_suite_delete $a
        }
        return $r
      }
      exists {
        set name [lindex $args 0]
        if {[::coil_suite_host_file exists $name]} { return 1 }
        return [expr {[coil_suite_size $name] >= 0}]
      }
      size {
        set name [lindex $args 0]
        set n [coil_suite_size $name]
        if {$n >= 0} { return $n }
      }
    }
    uplevel 1 [list ::coil_suite_host_file $cmd {*}$args]
  }
}

source $argv0
