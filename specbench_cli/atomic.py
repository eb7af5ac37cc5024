"""Whole-file writes that never leave a 0-byte or half-written file: the data goes to a temporary
file in the same folder, is flushed to disk, and is renamed over the target (atomic on POSIX and
Windows); on any failure (a full disk, Ctrl-C) the temporary file is removed and the target keeps
its old content, or stays absent.

Links: the temporary file gets a fresh random name and is created exclusively (`O_EXCL`, which
never follows a link), and the rename replaces whatever is at the target, a planted symbolic
link included, instead of writing through it; so a folder from elsewhere holding
`manifest.json -> /some/file` cannot make specbench overwrite that file.

Output folders (`OutputFolder`, `output_folder_problem`, `install_folder`, `write_staged`): what
a command finds in its output folder is its own earlier output or refused; what it removes is
removed name by name, links as links."""

from __future__ import annotations

import fnmatch
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Union

Data = Union[str, bytes, Callable[[Path], None]]


def atomic_write(path: Union[str, Path], data: Data, encoding: str = "utf-8") -> Path:
    """Write `data` (text, bytes, or a function that writes the file at the path it is given)
    to `path` atomically; returns `path`."""
    path = Path(path)
    tmp, fd = new_temp(path)
    try:
        with open(tmp, "wb", opener=lambda _path, _flags: fd) as f:  # the file created just now
            if not callable(data):
                f.write(data.encode(encoding) if isinstance(data, str) else data)
        if callable(data):
            data(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def new_temp(path: Path) -> tuple[Path, int]:
    """A new empty file beside `path` (`.NAME.PID.RANDOM.tmp`) and its open descriptor: created
    exclusively, so a link or file already at that name is never opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def output_problem(path: Union[str, Path], folder: bool) -> Union[str, None]:
    """Why `path` cannot become an output file (folder=False) or folder (folder=True), or None:
    checked before any work starts, so a bad output is not found after a long computation."""
    path = Path(path).expanduser()
    if path.exists():
        if folder and not path.is_dir():
            return f"{path} exists and is not a folder"
        if not folder and path.is_dir():
            return f"{path} is a folder, not a file"
    parent = path if folder and path.exists() else path.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{path}: {probe} is a file, so nothing can be written under it"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{path}: {probe} is not writable"
    return None


# ----------------------------------------------------------------------------- output folders
# A command's output folder holds its own files only: what is there already is either an earlier
# output of the same command (replaced with --force) or refused, so `--out ~/Documents` never
# deletes what specbench did not make. A link given as the folder is refused (writing into it
# would write into the folder it names), and the names removed are removed as themselves: a link
# at one of the command's names is unlinked, never followed, and no folder holding another's file
# is removed whole.

# the temporary names of this module (`.NAME.PID.RANDOM.tmp`) and of `write_staged`, left by an
# interrupted write: always the writer's own
TEMP_NAMES = (".?*.[0-9]*.????????.tmp", ".specbench-stage-*")


@dataclass(frozen=True)
class OutputFolder:
    """What one command writes at the top of its output folder.

    `command`: its name in messages ("heads import"); `what`: what a finished output is ("heads",
    "a datastore"); `marker`: the file a finished output holds (written last); `own`: glob
    patterns of every name it writes there. A pattern `DIR/PATTERN` makes DIR a folder of its own
    holding only names that match PATTERN (`checkpoints/step-*`): removed entry by entry."""

    command: str
    what: str
    marker: str
    own: tuple[str, ...]

    def subfolders(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        for pattern in self.own:
            if "/" in pattern:
                folder, inner = pattern.split("/", 1)
                found[folder] = (*found.get(folder, ()), inner)
        return found

    def is_own(self, entry: Path) -> bool:
        """Whether `entry` (a name at the top of the folder) is one this command writes: a file
        or link at one of its names, or a folder of its own holding only its names. A link is
        own at any of its names (removing a link never touches what it names)."""
        name, subfolders = entry.name, self.subfolders()
        if entry.is_symlink():
            return name in subfolders or _matches(name, self.own + TEMP_NAMES)
        if entry.is_dir():
            if name in subfolders:
                return all(_matches(child.name, subfolders[name] + TEMP_NAMES) for child in entry.iterdir())
            return fnmatch.fnmatchcase(name, TEMP_NAMES[1])
        return _matches(name, tuple(p for p in self.own if "/" not in p) + TEMP_NAMES)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def foreign_entries(folder: Path, spec: OutputFolder) -> list[str]:
    """Names at the top of `folder` that `spec`'s command does not write, sorted."""
    return sorted(entry.name for entry in Path(folder).iterdir() if not spec.is_own(entry))


def _names(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def link_problem(path: Union[str, Path]) -> str:
    """The one line for a symbolic link given as (or planted at) a place specbench writes."""
    return (f"{path} is a symbolic link; specbench never writes into or removes through a link it did not "
            f"create (give the folder itself)")


def output_folder_problem(path: Union[str, Path], spec: OutputFolder, force: bool = False) -> Union[str, None]:
    """Why `path` cannot be `spec`'s output folder, or None; checked before any work starts.

    Refused: a symbolic link; a file; an unwritable place; a folder holding any name the command
    does not write (even with `force`, which replaces only an earlier output of the command); a
    folder holding the command's names without `force` (a finished output, or an unfinished one).
    A missing or empty folder is always fine."""
    path = Path(path).expanduser()
    if path.is_symlink():
        return link_problem(path)
    if problem := output_problem(path, folder=True):
        return problem
    try:
        if not path.is_dir() or not any(path.iterdir()):
            return None
        foreign = foreign_entries(path, spec)
    except OSError as e:  # an unreadable folder, or one changing under us
        return f"{path} cannot be read ({e.strerror or type(e).__name__})"
    if foreign:
        return (f"{path} holds files `{spec.command}` does not write ({_names(foreign)}); give a new or empty "
                f"folder (--force replaces only an earlier output of `{spec.command}`, never other files)")
    if force:
        return None
    marker = path / spec.marker
    if marker.is_file() and not marker.is_symlink():
        return f"{path} already holds {spec.what}; pass --force to replace it"
    return f"{path} holds an unfinished {spec.what} (no {spec.marker}); pass --force to replace it"


def remove_entry(path: Path) -> None:
    """Remove `path` as itself: a link or file is unlinked (a link's target is never touched), a
    real folder removed with everything in it (`shutil.rmtree`, which removes links inside as
    links). Nothing there: nothing done."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def clear_output(folder: Union[str, Path], spec: OutputFolder) -> list[str]:
    """Remove `spec`'s own entries at the top of `folder` (a folder of its own: only the names
    it writes there, then the folder itself once empty); returns the names left (other files,
    which are never removed)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise NotADirectoryError(link_problem(folder))
    if not folder.is_dir():
        return []
    subfolders = spec.subfolders()
    for entry in sorted(folder.iterdir()):
        if not spec.is_own(entry):
            continue
        if entry.name in subfolders and entry.is_dir() and not entry.is_symlink():
            for child in entry.iterdir():
                if _matches(child.name, subfolders[entry.name] + TEMP_NAMES):
                    remove_entry(child)
            if not any(entry.iterdir()):
                entry.rmdir()
        else:
            remove_entry(entry)
    return sorted(entry.name for entry in folder.iterdir())


def install_folder(new: Path, out: Path, spec: OutputFolder) -> None:
    """Put the finished folder `new` (beside `out`) in place of `out`: an earlier output of the
    same command at `out` is cleared name by name, the then empty folder removed and `new`
    renamed over it. FileExistsError (nothing changed) when `out` is a link or holds files the
    command does not write."""
    if out.is_symlink():
        raise FileExistsError(link_problem(out))
    if out.is_dir():
        if foreign := foreign_entries(out, spec):
            raise FileExistsError(f"{out} holds files `{spec.command}` does not write ({_names(foreign)}); "
                                  f"left as they were")
        clear_output(out, spec)
        out.rmdir()
    os.replace(new, out)


def write_staged(folder: Union[str, Path], write: Callable[[Path], None]) -> list[str]:
    """`write(stage)` fills a fresh, empty folder inside `folder` (created if missing; a link
    there is refused), whose entries are then renamed into `folder` one by one: a name already
    there, a planted link included, is replaced, never written through. Returns the names."""
    folder = Path(folder)
    if folder.is_symlink():
        raise NotADirectoryError(link_problem(folder))
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".specbench-stage-", dir=folder))
    try:
        write(stage)
        names = sorted(p.name for p in stage.iterdir())
        for name in names:
            target = folder / name
            if target.is_symlink():
                target.unlink()  # the link itself: what it names is never touched
            elif (stage / name).is_dir() and target.is_dir() and any(target.iterdir()):
                raise FileExistsError(f"{target} is a folder already; not replaced")
            os.replace(stage / name, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return names
