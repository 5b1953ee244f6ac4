"""A static archive whose calls into glibc bind to versions that glibc 2.28 defines.

glibc 2.34 moved libpthread, libdl and librt into libc.so.6 and gave the functions it moved a new
default version, GLIBC_2.34. Linked on Debian 12 (glibc 2.36), libcudart_static.a's calls to them
bind to that version, and a library holding such a reference does not load where glibc is older
(RHEL 8: 2.28, Ubuntu 20.04: 2.31). Each of them keeps its old version: the default one of
libpthread.so.0, libdl.so.2 or librt.so.1 before 2.34, from 2.34 on a compatibility symbol of
libc.so.6 that behaves as the old one did.

A copy of the archive (objcopy --redefine-sym) names each call F as F@VERSION, its old version:
in an object file that is a reference to that version, as the assembler's .symver writes it, and
ld.bfd and gold (the one Bazel's toolchain runs) bind it so. (-Wl,--wrap=F with trampolines that
jump to F@VERSION does not work with gold: it wraps F@VERSION too, and each trampoline jumps to
itself.) The three old libraries are linked as DT_NEEDED, so that glibc < 2.34 loads the ones
that define these functions; from 2.34 on they are empty.
"""

# The calls of libcudart_static.a, CUDA 13's and Debian's CUDA 11.8's, that bind to GLIBC_2.34
# when linked here, each with its x86_64 version before 2.34. A toolkit that calls one more
# shows in the wheel's platform tag (tools/wheel_test.sh checks it): add it here.
GLIBC_2_34_MOVED = [
    "dlclose@GLIBC_2.2.5",
    "dlerror@GLIBC_2.2.5",
    "dlmopen@GLIBC_2.3.4",
    "dlopen@GLIBC_2.2.5",
    "dlsym@GLIBC_2.2.5",
    "dlvsym@GLIBC_2.2.5",
    "pthread_condattr_setpshared@GLIBC_2.2.5",
    "pthread_create@GLIBC_2.2.5",
    "pthread_detach@GLIBC_2.2.5",
    "pthread_getspecific@GLIBC_2.2.5",
    "pthread_join@GLIBC_2.2.5",
    "pthread_key_create@GLIBC_2.2.5",
    "pthread_key_delete@GLIBC_2.2.5",
    "pthread_kill@GLIBC_2.2.5",
    "pthread_mutex_trylock@GLIBC_2.2.5",
    "pthread_mutexattr_destroy@GLIBC_2.2.5",
    "pthread_mutexattr_init@GLIBC_2.2.5",
    "pthread_mutexattr_setpshared@GLIBC_2.2.5",
    "pthread_mutexattr_settype@GLIBC_2.2.5",
    "pthread_once@GLIBC_2.2.5",
    "pthread_rwlock_destroy@GLIBC_2.2.5",
    "pthread_rwlock_init@GLIBC_2.2.5",
    "pthread_rwlock_rdlock@GLIBC_2.2.5",
    "pthread_rwlock_timedrdlock@GLIBC_2.2.5",
    "pthread_rwlock_timedwrlock@GLIBC_2.2.5",
    "pthread_rwlock_tryrdlock@GLIBC_2.2.5",
    "pthread_rwlock_trywrlock@GLIBC_2.2.5",
    "pthread_rwlock_unlock@GLIBC_2.2.5",
    "pthread_rwlock_wrlock@GLIBC_2.2.5",
    "pthread_rwlockattr_destroy@GLIBC_2.2.5",
    "pthread_rwlockattr_init@GLIBC_2.2.5",
    "pthread_rwlockattr_setpshared@GLIBC_2.2.5",
    "pthread_setspecific@GLIBC_2.2.5",
    "pthread_spin_destroy@GLIBC_2.2.5",
    "pthread_spin_init@GLIBC_2.2.5",
    "pthread_spin_lock@GLIBC_2.2.5",
    "pthread_spin_trylock@GLIBC_2.2.5",
    "pthread_spin_unlock@GLIBC_2.2.5",
    "sem_destroy@GLIBC_2.2.5",
    "sem_init@GLIBC_2.2.5",
    "sem_post@GLIBC_2.2.5",
    "sem_timedwait@GLIBC_2.2.5",
    "sem_trywait@GLIBC_2.2.5",
    "sem_wait@GLIBC_2.2.5",
    "shm_open@GLIBC_2.2.5",
    "shm_unlink@GLIBC_2.2.5",
]

def glibc_2_28_library(name, archive):
    """A cc_library of the static archive at the path archive, its calls renamed as above."""
    renames = " ".join([
        "--redefine-sym=%s=%s" % (s.split("@")[0], s)
        for s in GLIBC_2_34_MOVED
    ])
    native.genrule(
        name = name + "_archive",
        outs = [name + ".a"],
        cmd = "$(OBJCOPY) " + renames + " " + archive + " $@",
        toolchains = ["@bazel_tools//tools/cpp:current_cc_toolchain"],
    )
    native.cc_library(
        name = name,
        srcs = [name + ".a"],
        # Needed even where nothing binds to them (glibc >= 2.34): before, they define the calls.
        linkopts = [
            "-Wl,--push-state,--no-as-needed",
            "-l:libpthread.so.0",
            "-l:libdl.so.2",
            "-l:librt.so.1",
            "-Wl,--pop-state",
        ],
    )
