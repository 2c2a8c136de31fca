"""Open files a forked copy of this process shares with it: their offsets.

A child made by ``fork`` shares each open file *description* with its parent, offset included: a
read or seek in the child moves the parent's offset (the user's open file, a dataset's file handle).
:func:`unshare_offsets` (in the child) gives each regular file a description of its own;
:func:`offsets` and :func:`put_offsets_back` (in the parent) put back what could not be unshared.
Used by :mod:`vramnb.planner._read_aside` (``fit`` reading a loader aside) and
:mod:`vramnb.distributed._launch` (``profile_distributed``'s forked ranks running the user's code).
"""

from __future__ import annotations

import os

__all__ = ["offsets", "put_offsets_back", "unshare_offsets"]


def offsets() -> dict[int, tuple[int, int, int]]:
    """Each open file descriptor's (device, inode, offset), where it has an offset."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(x) for x in os.listdir(folder)]
            break
        except (OSError, ValueError):
            continue
    else:
        return {}
    out = {}
    for fd in fds:
        try:
            st = os.fstat(fd)
            out[fd] = (st.st_dev, st.st_ino, os.lseek(fd, 0, os.SEEK_CUR))
        except OSError:  # closed meanwhile, or a pipe or socket: no offset
            continue
    return out


def unshare_offsets() -> list[int]:
    """In the copy: give each open regular file a file description of its own (the same file reopened
    through ``/proc/self/fd``, its access mode and ``O_APPEND`` kept, at the same offset), so that its
    reads and seeks move no offset of this process's parent. Returns the descriptors with an offset
    it could not unshare (another platform, a file it may not reopen, a block device); character
    devices are left alone."""
    import fcntl
    import stat

    shared = []
    for fd in offsets():
        try:
            st = os.fstat(fd)
            if stat.S_ISCHR(st.st_mode):  # /dev/null, a terminal: an offset that reads nothing back
                continue
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if not stat.S_ISREG(st.st_mode) or not os.path.isdir("/proc/self/fd"):
                raise OSError("not a regular file reopened through /proc")
            new = os.open(f"/proc/self/fd/{fd}", (flags & os.O_ACCMODE) | (flags & os.O_APPEND))
            try:
                os.lseek(new, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
                os.dup2(new, fd, inheritable=os.get_inheritable(fd))
            finally:
                os.close(new)
        except OSError:
            shared.append(fd)
    return shared


def put_offsets_back(found: dict[int, tuple[int, int, int]]) -> None:
    for fd, (dev, ino, off) in found.items():
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (dev, ino) and os.lseek(fd, 0, os.SEEK_CUR) != off:
                os.lseek(fd, off, os.SEEK_SET)
        except OSError:
            continue
