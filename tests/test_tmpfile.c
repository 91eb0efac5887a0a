// Tests of formats/tmpfile.h: a temporary whose writer was SIGKILLed (with a file that extends
// its name, as the .kvq writer's archive does) is removed by the next run, and nothing else is:
// not a live writer's, not one whose lock is held or whose pid lives, not other names, not a
// symlink, not the destination.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/tmpfile.h"

static char g_dir[64], g_dest[128];

static int exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

static void touch(const char *p) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    close(fd);
}

// A child that creates a temporary for g_dest (and "<name>.z" beside it), sends the name over a
// pipe, then either dies by SIGKILL (kill != 0) or waits for the pipe back to close.
static pid_t writer(int kill_self, char *name, size_t cap, int *hold) {
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]), close(down[1]);
        char *n = NULL;
        int fd = kvq_tmp_create(g_dest, &n);
        if (fd < 0) _exit(3);
        char z[600];
        snprintf(z, sizeof z, "%s.z", n);
        touch(z);
        if (write(up[1], n, strlen(n) + 1) < 0) _exit(4);
        if (kill_self) raise(SIGKILL);
        char c;
        while (read(down[0], &c, 1) > 0) {}
        _exit(0);
    }
    close(up[1]), close(down[0]);
    ssize_t k = read(up[0], name, cap);
    assert_true(k > 0);
    close(up[0]);
    *hold = down[1];
    return pid;
}

static void test_killed_writer_cleaned(void **st) {
    char name[600], z[700];
    int hold;
    pid_t pid = writer(1, name, sizeof name, &hold);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    close(hold);
    snprintf(z, sizeof z, "%s.z", name);
    assert_true(exists(name) && exists(z)); // what the kill left
    assert_int_equal(kvq_tmp_clean(g_dest), 1);
    assert_false(exists(name));
    assert_false(exists(z));
    assert_true(exists(g_dest));
    assert_int_equal(kvq_tmp_clean(g_dest), 0);
}

static void test_next_create_cleans(void **st) {
    char name[600];
    int hold, ws;
    pid_t pid = writer(1, name, sizeof name, &hold);
    waitpid(pid, &ws, 0);
    close(hold);
    assert_true(exists(name));
    char *mine = NULL;
    int fd = kvq_tmp_create(g_dest, &mine); // the next run
    assert_true(fd >= 0);
    assert_false(exists(name));
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    mode_t um = umask(0);
    umask(um);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~um);
    assert_int_equal(kvq_tmp_clean(g_dest), 0); // our own: live pid, lock held
    assert_true(exists(mine));
    close(fd);
    unlink(mine);
    free(mine);
}

static void test_live_writer_kept(void **st) {
    char name[600], z[700];
    int hold, ws;
    pid_t pid = writer(0, name, sizeof name, &hold);
    snprintf(z, sizeof z, "%s.z", name);
    assert_int_equal(kvq_tmp_clean(g_dest), 0);
    assert_true(exists(name) && exists(z));
    close(hold); // the writer ends without cleaning up (as a crash would): then it is stale
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_int_equal(kvq_tmp_clean(g_dest), 1);
    assert_false(exists(name) || exists(z));
}

// A pid that is certainly dead: a child that exited and was reaped.
static long dead_pid(void) {
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) _exit(0);
    int ws;
    waitpid(p, &ws, 0);
    return (long)p;
}

static void test_not_provably_abandoned_kept(void **st) {
    char locked[300], live[300], link[300], target[300];
    const long dp = dead_pid();
    // dead pid, but someone holds the lock
    snprintf(locked, sizeof locked, "%s/.dest.kvq.kvqtmp-%ld-aaaaaa", g_dir, dp);
    touch(locked);
    int fd = open(locked, O_RDONLY);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    // live pid (ours), no lock
    snprintf(live, sizeof live, "%s/.dest.kvq.kvqtmp-%ld-bbbbbb", g_dir, (long)getpid());
    touch(live);
    // a symlink with a dead pid's name: never followed, never removed
    snprintf(target, sizeof target, "%s/precious", g_dir);
    touch(target);
    snprintf(link, sizeof link, "%s/.dest.kvq.kvqtmp-%ld-cccccc", g_dir, dp);
    assert_int_equal(symlink(target, link), 0);
    // other names: another destination, other patterns, a bad pid field, a short suffix
    const char *others[] = {".other.kvq.kvqtmp-%ld-dddddd", "dest.kvq.tmp.%ld", ".dest.kvq.kvqtmp-x%ld-eeeeee",
                            ".dest.kvq.kvqtmp-%ld-abc", ".dest.kvq.tmp-%ld"};
    char op[5][300];
    for (int i = 0; i < 5; i++) {
        char nm[100];
        snprintf(nm, sizeof nm, others[i], dp);
        snprintf(op[i], sizeof op[i], "%s/%s", g_dir, nm);
        touch(op[i]);
    }
    assert_int_equal(kvq_tmp_clean(g_dest), 0);
    assert_true(exists(locked) && exists(live) && exists(link) && exists(target) && exists(g_dest));
    for (int i = 0; i < 5; i++) assert_true(exists(op[i]));
    close(fd); // the lock released: now provably abandoned
    assert_int_equal(kvq_tmp_clean(g_dest), 1);
    assert_false(exists(locked));
    assert_true(exists(live) && exists(link) && exists(target));
    unlink(live), unlink(link), unlink(target);
    for (int i = 0; i < 5; i++) unlink(op[i]);
}

static int setup(void **st) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kvq-tmpfile-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_dest, sizeof g_dest, "%s/dest.kvq", g_dir);
    touch(g_dest);
    return 0;
}

static int teardown(void **st) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_killed_writer_cleaned),
        cmocka_unit_test(test_next_create_cleans),
        cmocka_unit_test(test_live_writer_kept),
        cmocka_unit_test(test_not_provably_abandoned_kept),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
