// Temporary files beside a destination, named so that a later run can prove them abandoned:
// ".<base>.kvqtmp-<pid>-XXXXXX" (mkstemp), flock'ed by their writer for as long as it writes.
// A writer killed mid-write (SIGKILL included) loses both: its lock (the kernel drops it) and
// its pid (dead). The next writer of the same destination removes such files, and only those:
// kvq_tmp_create calls kvq_tmp_clean first. Every writer of kvq uses it (kvqfile.c,
// safetensors.c, libconv/convert/export.c, tools/outfile.c, kvq-run --save-ids).
#ifndef KVQ_TMPFILE_H
#define KVQ_TMPFILE_H

/** Creates and locks (flock LOCK_EX) a temporary file beside path, after removing the
 *  abandoned ones of earlier runs (kvq_tmp_clean). Mode 0666 & ~umask (not mkstemp's 0600).
 *  A writer may create more names that extend it ("<name>.z", ...): they share its fate.
 *  @return the fd (the lock lives as long as it, or a dup, is open) with *name malloc'd
 *  (caller frees), or -1 with errno set and *name NULL. */
int kvq_tmp_create(const char *path, char **name);

/** Removes the temporaries of path that no live writer holds: each
 *  "<dir>/.<base>.kvqtmp-<pid>-XXXXXX" whose pid is not a live process and whose flock can be
 *  taken, checked under that lock to still be the file the name leads to, with every name
 *  that extends it. Files of other naming, other destinations, live pids or held locks are
 *  left alone. @return the number of temporaries removed (families count once). */
int kvq_tmp_clean(const char *path);

#endif
