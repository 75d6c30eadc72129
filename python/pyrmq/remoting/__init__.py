"""RocketMQ's 4.x remoting protocol: codes, commands, the frame codec and typed headers.

>>> from pyrmq.remoting import FrameDecoder, RemotingCommand, RequestCode, encode
>>> cmd = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}")
>>> FrameDecoder().feed(encode(cmd))[0].code == RequestCode.HEART_BEAT
True
"""

from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import (
    MAX_FRAME_BYTES,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    MQVersion,
    RequestCode,
    ResponseCode,
    SerializeType,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "FrameDecoder",
    "LanguageCode",
    "MQVersion",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "encode",
]
