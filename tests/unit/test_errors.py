import pickle

import pytest

from pyrmq import errors
from pyrmq.errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    ConfigError,
    CorruptRecordError,
    DiskFullError,
    FrameDecodeError,
    HeaderError,
    InvalidQueueIdError,
    InvalidTopicError,
    MessageBodyError,
    MessageIllegalError,
    MessageTooLargeError,
    NoRouteError,
    PartialFailureError,
    PropertiesTooLargeError,
    PyrmqError,
    RemotingError,
    ReplicationError,
    RequestTimeoutError,
    SendError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
    SystemTopicError,
)

PARENTS = {
    PyrmqError: (Exception,),
    ConfigError: (PyrmqError, ValueError),
    StoreError: (PyrmqError,),
    StoreClosedError: (StoreError,),
    CorruptRecordError: (StoreError,),
    DiskFullError: (StoreError,),
    StoreIOError: (StoreError,),
    StoreReadOnlyError: (StoreError,),
    ReplicationError: (StoreError,),
    MessageIllegalError: (PyrmqError, ValueError),
    MessageBodyError: (PyrmqError, ValueError),
    InvalidTopicError: (MessageIllegalError,),
    MessageTooLargeError: (MessageIllegalError,),
    PropertiesTooLargeError: (MessageIllegalError,),
    InvalidQueueIdError: (MessageIllegalError,),
    SystemTopicError: (MessageIllegalError,),
    RemotingError: (PyrmqError,),
    FrameDecodeError: (RemotingError,),
    HeaderError: (RemotingError,),
    ClientError: (PyrmqError,),
    ClientStateError: (ClientError,),
    NoRouteError: (ClientError,),
    BrokerError: (ClientError,),
    SendError: (ClientError,),
    PartialFailureError: (ClientError,),
    RequestTimeoutError: (ClientError, TimeoutError),
}


def test_hierarchy_matches_the_contract() -> None:
    for cls, parents in PARENTS.items():
        assert cls.__bases__ == parents, cls.__name__


def test_every_exported_class_is_covered_and_documented() -> None:
    exported = {getattr(errors, name) for name in errors.__all__}

    assert exported == set(PARENTS)
    assert all(cls.__doc__ for cls in exported)


def test_store_errors_are_not_value_errors() -> None:
    assert not issubclass(StoreError, ValueError)


def test_corrupt_record_error_carries_offset_and_path() -> None:
    error = CorruptRecordError("bad crc", phy_offset=4096, path="/store/commitlog/0")

    assert str(error) == "bad crc"
    assert (error.phy_offset, error.path) == (4096, "/store/commitlog/0")
    assert (CorruptRecordError("bad magic").phy_offset, CorruptRecordError().path) == (None, None)


def test_config_error_carries_its_problems() -> None:
    assert ConfigError("two problems", problems=["a", "b"]).problems == ("a", "b")
    assert ConfigError("from elsewhere").problems == ()


@pytest.mark.parametrize(
    "error",
    [
        CorruptRecordError("bad crc", phy_offset=7, path="/x"),
        ConfigError("bad", problems=["p"]),
        InvalidTopicError("topic 'a b' has a space"),
        BrokerError(17, "topic[T] not exist", "127.0.0.1:10911"),
    ],
)
def test_errors_survive_pickling(error: PyrmqError) -> None:
    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is type(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)


def test_broker_error_names_the_broker_code_and_remark() -> None:
    error = BrokerError(17, "topic[T] not exist", "127.0.0.1:10911")

    assert str(error) == "broker 127.0.0.1:10911 answered code 17: topic[T] not exist"
    assert (error.code, error.remark, error.broker_addr) == (
        17,
        "topic[T] not exist",
        "127.0.0.1:10911",
    )


def test_partial_failure_error_names_each_failed_target_and_why() -> None:
    refused = BrokerError(17, "no such account", "127.0.0.1:10911")
    error = PartialFailureError(
        ["127.0.0.1:10921"], {"127.0.0.1:10911": refused, "127.0.0.1:10931": TimeoutError("late")}
    )

    assert str(error) == (
        "failed on 127.0.0.1:10911: broker 127.0.0.1:10911 answered code 17: no such account; "
        "127.0.0.1:10931: late; succeeded on 127.0.0.1:10921"
    )
    assert error.succeeded == ("127.0.0.1:10921",)
    assert list(error.failed) == ["127.0.0.1:10911", "127.0.0.1:10931"]
    assert error.result is None
    copy = pickle.loads(pickle.dumps(PartialFailureError(["a:1"], {}, ["a:1"])))
    assert (copy.succeeded, copy.failed, copy.result) == (("a:1",), {}, ["a:1"])
