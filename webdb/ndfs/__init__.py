"""ndfs: the shared file namespace of a distributed WebDB (Nutch's NutchDistributedFileSystem).

A NutchFile ``(db, share group, name)`` lives at ``<root>/<db>/<group>/<name>`` on every
location (host or local path) that hosts.ini assigns to the group.  Transports copy files in
and out of one location with an atomic put and a ``<name>.completed`` flag; share groups run an
operation on every location and report per host.  See docs/ndfs.md.

Owns: hosts.ini (config.py), file names (names.py), the transports — local, SFTP, scp/rsync —
with their atomic put (transport.py, ssh.py), the one ssh connection factory (connect.py:
host-key policy, timeouts, keepalive, jump host), share-group operations (group.py) and
the errors each names a host and path with (errors.py).
Knows nothing of tables or databases: it moves named files.

May import: ``webdb.errors`` only (contract ``ndfs-stands-alone`` in pyproject.toml).
"""

from webdb.ndfs.config import HostConfig, JumpHost, Location, NdfsConfig, load_config, parse_config, section_group
from webdb.ndfs.connect import fabric_connection, ssh_client
from webdb.ndfs.errors import (
    ChecksumMismatch,
    CompletionTimeout,
    ConfigError,
    DiskFull,
    HostKeyRejected,
    HostUnreachable,
    RemoteFileNotFound,
    TransportError,
)
from webdb.ndfs.group import NDFS, GroupError, GroupResult, HostResult, ShareGroup, open_transport
from webdb.ndfs.names import COMPLETED_SUFFIX, NutchFile, validate_component, validate_name
from webdb.ndfs.ssh import SFTPTransport, SubprocessTransport, ssh_options
from webdb.ndfs.transport import Completion, LocalTransport, Transport

__all__ = [
    "COMPLETED_SUFFIX",
    "NDFS",
    "ChecksumMismatch",
    "Completion",
    "CompletionTimeout",
    "ConfigError",
    "DiskFull",
    "GroupError",
    "GroupResult",
    "HostConfig",
    "HostKeyRejected",
    "HostResult",
    "HostUnreachable",
    "JumpHost",
    "Location",
    "LocalTransport",
    "NdfsConfig",
    "NutchFile",
    "RemoteFileNotFound",
    "SFTPTransport",
    "ShareGroup",
    "SubprocessTransport",
    "Transport",
    "TransportError",
    "fabric_connection",
    "load_config",
    "open_transport",
    "parse_config",
    "section_group",
    "ssh_client",
    "ssh_options",
    "validate_component",
    "validate_name",
]
