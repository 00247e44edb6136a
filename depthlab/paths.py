"""Where results go: the checks made before any work on a path a user named, and safe writes.

The rule these serve: a bad output path is refused before the work it would receive (InputError, one
line naming the flag or argument), and nothing a user stored is replaced silently. Every output is
written by :func:`replace_file`: through a temporary file ``mkstemp`` makes beside it (so a failed
write keeps the old file, and no user file is ever taken for the temporary one), replacing only a
regular file (never a device node, FIFO or socket); a full disk is one line naming the space needed.
``write_json`` says when it replaced a file.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import sys
import tempfile
from pathlib import Path

from depthlab.errors import InputError

# Errors that mean the user named a path that cannot be written: bad input. A full disk is said in its
# own words (disk_full); others, such as an I/O error, are not the user's input and are left to propagate.
BAD_PATH = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)
# The figure formats depthlab writes (matplotlib draws each without a display).
PLOT_FORMATS = ("png", "pdf", "svg")
NAME_CHARS = 80  # a generated file or folder name stays well under any filesystem's 255-byte limit
NAME_MAX = 255  # bytes in one path component (Linux, macOS and Windows filesystems), when pathconf cannot say
PATH_MAX = 4096  # bytes in a whole path (Linux)
# What a path that exists but is not a regular file or folder is, by its stat type: reading one can
# block forever (a FIFO with no writer), never end (/dev/zero) or fail in odd ways (a socket).
SPECIAL_FILES = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def printable(text) -> str:
    """``text`` as one line of a terminal shows it: control characters (a newline, an ANSI escape, a
    carriage return) written as their Python escapes, so a hostile name cannot move the cursor or
    forge a second line."""
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in str(text))


def check_path_type(value, name: str, what: str, none_ok: bool = False) -> None:
    """TypeError naming argument ``name`` unless ``value`` is a path (str or os.PathLike; None too where
    ``none_ok``): a number or None would fail deep in os.path with no argument named."""
    if (value is None and none_ok) or isinstance(value, (str, os.PathLike)):
        return
    raise TypeError(f"{name} must be {what} (str or pathlib.Path), not {type(value).__name__}")


def check_path(path: str | Path, flag: str) -> None:
    """Refuse (InputError naming ``flag``) a path the filesystem cannot hold, before anything is made or
    read: a NUL byte, a component longer than the filesystem's name limit, or a whole path longer
    than PATH_MAX. (Without this the error is ENAMETOOLONG, deep inside the work.)"""
    text = os.fspath(path)
    if not text.strip():  # '' would mean the current folder to some calls and nothing to others
        raise InputError(f"{flag}: an empty path names no file or folder")
    if "\x00" in text:
        raise InputError(f"{flag}: a path cannot hold a NUL byte")
    broken = dangling_folder(text)
    if broken is not None:
        raise InputError(
            f"{flag} {printable(text)}: {printable(broken)} is a link to {printable(os.readlink(broken))}, a "
            "folder that does not exist; make that folder, remove the link, or choose another path"
        )
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX:
        raise InputError(f"{flag}: the path is {len(raw)} bytes long; the limit is {PATH_MAX}")
    limit = _name_max(text)
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 24 else part[:20] + "..."
            raise InputError(
                f"{flag}: a name in the path is {size} bytes long ({shown!r}); the filesystem allows {limit}"
            )


def dangling_folder(path: str) -> str | None:
    """The first folder on the way to ``path`` (its last part excluded) that is a symbolic link to
    nothing, or None. Through such a link no file can be made or read: the OS says only "File exists"
    or "No such file", which points the wrong way."""
    parts = Path(path).parts[:-1]
    for i in range(1, len(parts) + 1):
        here = os.path.join(*parts[:i])
        if os.path.islink(here) and not os.path.exists(here):
            return here
    return None


def broken_link(path: str | Path) -> str | None:
    """What is wrong with ``path`` if it is a symbolic link that leads nowhere: "a symbolic link to X,
    which does not exist", or "a symbolic link that loops (a -> b -> a)"; None otherwise. The OS says
    "No such file" of both, or "Too many levels of symbolic links", neither naming the link."""
    if not os.path.islink(path):
        return None
    try:
        os.stat(path)
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            return f"a symbolic link to {printable(os.readlink(path))}, which does not exist"
    chain = [os.path.normpath(path)]
    while os.path.islink(chain[-1]) and len(chain) <= 8:  # until a link comes round again
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), os.readlink(chain[-1]))))
        if chain[-1] in chain[:-1]:
            break
    return f"a symbolic link that loops ({' -> '.join(printable(c) for c in chain)})"


def _name_max(path: str) -> int:
    """The longest file name (bytes) the filesystem under ``path`` takes."""
    try:
        return os.pathconf(existing_ancestor(path), "PC_NAME_MAX")
    except (OSError, ValueError):  # a name too long for even this look-up: the common limit
        return NAME_MAX


def check_input_file(path: str | Path, flag: str, missing_ok: bool = False) -> bool:
    """Refuse (InputError naming ``flag``) a file to be read that is missing (unless ``missing_ok``), a
    folder, or not a regular file (a FIFO, a device, a socket: reading one may block forever). Opens
    nothing. Returns whether ``path`` exists."""
    check_path(path, flag)
    link = broken_link(path)
    if link is not None and not (missing_ok and "loops" not in link):
        raise InputError(f"{flag} {printable(path)} is {link}; name the file itself")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return False
        raise InputError(f"{flag} {path} does not exist") from None
    except OSError as e:
        raise InputError(f"{flag} {path}: {e.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{flag} {path} is a directory, not a file")
    if not stat.S_ISREG(mode):
        kind = SPECIAL_FILES.get(stat.S_IFMT(mode), "not a regular file")
        raise InputError(f"{flag} {path} is {kind}; name a regular file")
    return True


def existing_ancestor(path: str | Path) -> Path:
    """``path`` itself (absolute) if it exists, else its nearest existing parent."""
    path = Path(path).absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_folder(path: str | Path, flag: str) -> Path:
    """Refuse (InputError naming ``flag``) a place where no folder can be made: a file in the way, or an
    unwritable parent, a name too long. Creates nothing; returns the nearest existing ancestor."""
    check_path(path, flag)
    where = existing_ancestor(path)
    if not where.is_dir():
        inside = "" if where == Path(path).absolute() else f": {where}"
        raise InputError(f"{flag} {path}{inside} is a file, not a folder")
    if not os.access(where, os.W_OK):
        raise InputError(f"{flag} {path}: the folder {where} is not writable")
    return where


# The folders make_folder created (each with the existing folder it was made under): a command refused
# after its output paths were checked removes those still empty (:func:`undo_new_folders`), so that a
# refusal leaves nothing behind.
_NEW_FOLDERS: list[tuple[str, str]] = []


def make_folder(folder: str, flag: str, path: str) -> None:
    """Create ``folder`` and its parents for the ``path`` given to ``flag``; InputError when it cannot be."""
    existing = existing_ancestor(folder)
    if not existing.is_dir():
        raise InputError(f"{flag} {path}: {existing} is a file, not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except BAD_PATH as e:
        raise InputError(f"{flag} {path}: cannot create the folder {folder}: {e.strerror}") from None
    if existing != Path(folder).absolute():
        _NEW_FOLDERS.append((os.path.abspath(folder), str(existing)))


def forget_new_folders() -> None:
    """Keep the folders :func:`make_folder` created so far (a command starting: they are not its own)."""
    _NEW_FOLDERS.clear()


def undo_new_folders() -> None:
    """Remove the folders :func:`make_folder` created since the last call that are still empty, deepest
    first (a folder something was written into is kept)."""
    while _NEW_FOLDERS:
        folder, existing = _NEW_FOLDERS.pop()
        while folder != existing:
            try:
                os.rmdir(folder)
            except OSError:
                break
            folder = os.path.dirname(folder)


def check_output_file(path: str | None, flag: str, formats: tuple[str, ...] = ()) -> bool:
    """Make sure, before any work, that the file ``path`` given to ``flag`` can be written.

    Its extension must be one of ``formats`` (when given); it must not be a folder; its folder is
    created here when missing. Returns whether ``path`` exists (it will be replaced). InputError names
    the flag otherwise. None and '-' (stdout) pass.
    """
    if path is None or path == "-":
        return False
    check_path(path, flag)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if formats and ext not in formats:
        kinds = ", ".join("." + f for f in formats)
        got = f"the file type .{ext} is" if ext else "a name without a file type is"
        raise InputError(f"{flag} {path}: {got} not supported; use {kinds}")
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a folder; name a file")
    folder = os.path.dirname(os.path.abspath(path))
    make_folder(folder, flag, path)
    if not os.access(folder, os.W_OK):
        raise InputError(f"{flag} {path}: the folder {folder} is not writable")
    exists = os.path.lexists(path)
    check_replaceable(path, flag)
    if exists and not os.access(path, os.W_OK):
        raise InputError(f"{flag} {path} is read-only; it is not replaced")
    return exists


def note_replaced(path: str, existed: bool, err=None) -> None:
    """Say on stderr that a user's file was replaced: replacing is expected on a rerun, but never silent."""
    if existed:
        (err or sys.stderr).write(f"replaced existing {path}\n")


def write_json(obj, path: str | None, flag: str = "--json") -> None:
    """Write ``obj`` to ``path`` ('-' = stdout; None = nowhere). An existing file is replaced, with a line on
    stderr saying so; the new text goes to a temporary file first, so a failed write keeps the old one."""
    if path is None:
        return
    text = json.dumps(obj, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    existed = check_output_file(path, flag)
    try:
        replace_file(path, text, flag)
    except BAD_PATH as e:
        raise InputError(f"cannot write {printable(path)}: {e.strerror}") from None
    note_replaced(path, existed)


def check_replaceable(path: str | Path, flag: str) -> None:
    """Refuse (InputError naming ``flag``) to replace anything but a regular file: a device node (as
    root, replacing /dev/null would remove it), a FIFO or a socket. A symbolic link is judged by its
    target, which is what gets replaced."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise InputError(f"{flag} {printable(path)}: {e.strerror}") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = SPECIAL_FILES.get(stat.S_IFMT(mode), "not a regular file")
        raise InputError(f"{flag} {printable(path)} is {kind}; only a regular file is replaced (name a file)")


def replace_file(path: str | Path, data: str | bytes, flag: str = "--out") -> None:
    """Write ``data`` to ``path`` atomically: into a temporary file that ``mkstemp`` makes beside the
    target (a name no user file has: it is created exclusively), synced, then renamed over it. Only a
    regular file (or a new name) is replaced (:func:`check_replaceable`); a symbolic link stays a link,
    its target replaced. A full disk is one InputError naming the path and the space needed; the
    temporary file is removed whatever happens."""
    check_replaceable(path, flag)
    target = os.path.realpath(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=os.path.dirname(target)
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path, len(raw)) from None
        raise
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def disk_full(path: str | Path, need: int) -> InputError:
    """The one line for a write that the disk had no room for: the path, the space it needed, the space free."""
    free = free_bytes(os.path.dirname(os.path.abspath(path)))
    have = "" if free is None else f", {_size(free)} free there"
    return InputError(
        f"the disk is full: writing {printable(path)} needs about {_size(need)}{have}; free some space "
        "or write elsewhere"
    )


def free_bytes(path: str | Path) -> int | None:
    """The bytes free to this user on the filesystem holding ``path`` (None when it cannot be told)."""
    try:
        st = os.statvfs(existing_ancestor(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@functools.cache
def _umask() -> int:
    """The process's umask (mkstemp makes its file 0600: the replaced file gets the usual mode)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def safe_name(text: str, keep: str = "-_.=+,", limit: int = NAME_CHARS) -> str:
    """``text`` as one file or folder name: characters other than letters, digits and ``keep`` become
    ``_``, at most ``limit`` of them; never empty, ``.`` or ``..``."""
    safe = "".join(c if c.isalnum() or c in keep else "_" for c in text)[:limit]
    return "_" if set(safe) <= {"."} else safe


def save_figure(fig, path: str, dpi: int = 110) -> str:
    """Write a matplotlib Figure to ``path`` (its format from the extension); InputError when the path
    cannot be written. Returns ``path``."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=dpi)
    except OSError as e:
        raise InputError(f"cannot write the figure {path}: {e.strerror or e}") from None
    return path
