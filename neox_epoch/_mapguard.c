/* Mapped reads that survive the file shrinking under them (neox_epoch.util.mapguard).
 *
 * Reading a page of a mapped file past its current end raises SIGBUS, which ends the process: an index cache that a
 * rank 0 rewrites (np.save truncates the file it writes) while neox-epoch maps it would kill the audit without a word.
 * While the guard is on, a SIGBUS for a nonexistent file page (BUS_ADRERR) maps one anonymous page of zeros over the
 * faulting page and counts the fault; the read is then retried and reads zeros. The caller asks for the count after
 * its pass and reports the file as changed while being read instead of trusting what it read. Any other SIGBUS, or a
 * page that cannot be replaced, goes to the handler that was there before (by default: the process ends, as without
 * the guard).
 *
 * guard(on) -> faults: on=1 installs the handler (nested calls count) and returns 0; on=0 returns the faults counted
 * since the matching on=1 and removes the handler when the last guard is off. faults() -> the count so far.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile sig_atomic_t faults = 0;
static struct sigaction previous;
static int depth = 0;
static uintptr_t page_size = 4096;

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)context;
    uintptr_t page = (uintptr_t)info->si_addr & ~(page_size - 1);
    if (info->si_code == BUS_ADRERR && page != 0 &&
        mmap((void *)page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
        faults = faults + 1;
        return;
    }
    sigaction(sig, &previous, NULL); /* the fault happens again on return, under the previous handler */
}

static PyObject *guard(PyObject *self, PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    if (on) {
        if (depth++ == 0) {
            struct sigaction action;
            memset(&action, 0, sizeof action);
            action.sa_sigaction = on_bus;
            action.sa_flags = SA_SIGINFO | SA_NODEFER;
            sigemptyset(&action.sa_mask);
            page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
            faults = 0;
            if (sigaction(SIGBUS, &action, &previous) != 0) {
                depth = 0;
                return PyErr_SetFromErrno(PyExc_OSError);
            }
        }
        return PyLong_FromLong(0);
    }
    long counted = (long)faults;
    if (depth > 0 && --depth == 0) sigaction(SIGBUS, &previous, NULL);
    return PyLong_FromLong(counted);
}

static PyObject *count(PyObject *self, PyObject *args) { return PyLong_FromLong((long)faults); }

static PyMethodDef methods[] = {
    {"guard", guard, METH_VARARGS, "guard(on) -> faults: install (1) or remove (0) the SIGBUS guard (module comment)."},
    {"faults", count, METH_NOARGS, "The SIGBUS faults the guard turned into zero pages since it was installed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mapguard", "Mapped reads that survive truncation.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__mapguard(void) { return PyModule_Create(&module); }
