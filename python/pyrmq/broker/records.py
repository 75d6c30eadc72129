"""Where fields stand in a record of RocketMQ's stored-message layout, for the broker's code
that rewrites records it serves or moves (the store's Rust codec owns the layout itself).

>>> reconsume_times_at(0), reconsume_times_at(0x10), reconsume_times_at(0x30)
(72, 84, 96)
"""

import struct

__all__ = ["reconsume_times_at", "sys_flag_of"]

# Bits of the sys flag: the born host and the store host are IPv6 (12 bytes longer each).
_BORN_HOST_V6 = 0x10
_STORE_HOST_V6 = 0x20


def sys_flag_of(record: bytes) -> int:
    return int(struct.unpack_from(">i", record, 36)[0])


def reconsume_times_at(sys_flag: int) -> int:
    """The offset of a record's reconsume times: after total size, magic, body CRC, queue id,
    flag, queue offset, physical offset, sys flag and born timestamp (48 bytes), the born
    host, the store timestamp and the store host."""
    born = 20 if sys_flag & _BORN_HOST_V6 else 8
    store = 20 if sys_flag & _STORE_HOST_V6 else 8
    return 48 + born + 8 + store
