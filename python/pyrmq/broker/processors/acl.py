"""The plain ACL's admin requests (``mqadmin updateAclConfig``, ``deleteAclConfig``,
``updateGlobalWhiteAddr``, ``clusterAclConfigVersion``, ``getAclConfig``):
UPDATE_AND_CREATE_ACL_CONFIG, DELETE_ACL_CONFIG, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
GET_BROKER_CLUSTER_ACL_INFO and GET_BROKER_CLUSTER_ACL_CONFIG.

A change is written to the broker's ``plain_acl.yml`` and applies to the next request; one
that cannot be made is answered with RocketMQ's failure code for it and the reason, and leaves
the file as it was. Only admin accounts may ask (see :mod:`pyrmq.broker.access`).

A broker without ``aclEnable`` answers every one of them with a failure, as RocketMQ's does;
where RocketMQ's sends nothing back (the two reads), this one answers SYSTEM_ERROR rather than
leave the client to time out.
"""

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyrmq.acl.edits import (
    AccountChange,
    acl_config,
    next_version,
    split_list,
    updated_account,
    with_global_white,
    without_account,
)
from pyrmq.acl.plain import AclError
from pyrmq.errors import HeaderError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["AclProcessor"]

log = logging.getLogger(__name__)

# A change to the ACL file's YAML document.
Edit = Callable[[dict[str, Any]], dict[str, Any]]

NOT_ENABLED = "ACL is not enabled on this broker (aclEnable=false)"


def _version_json(version: tuple[int, int]) -> str:
    """A DataVersion as RocketMQ 4.9's fastjson writes it."""
    counter, timestamp = version
    return json.dumps({"counter": counter, "timestamp": timestamp}, separators=(",", ":"))


class AclProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, self.update_account)
        server.register(RequestCode.DELETE_ACL_CONFIG, self.delete_account)
        server.register(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, self.update_global_white)
        server.register(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, self.acl_version)
        server.register(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, self.acl_config)

    async def _change(
        self,
        conn: Connection,
        request: RemotingCommand,
        failed: ResponseCode,
        what: str,
        change: Callable[[RemotingCommand], Edit],
    ) -> RemotingCommand:
        """Makes ``change`` (document -> document, given the parsed request) to the ACL file;
        ``failed`` and the reason when it cannot."""
        acl = self.broker.acl
        if acl is None:
            return RemotingCommand.response_to(request, failed, remark=NOT_ENABLED)
        try:
            edit = change(request)
            await asyncio.to_thread(acl.rewrite, lambda doc: next_version(edit(doc), _now_ms()))
        except (AclError, HeaderError) as e:
            log.warning("%s from %s refused: %s", what, conn.peer_address, e)
            return RemotingCommand.response_to(request, failed, remark=f"{what} failed: {e}")
        except OSError as e:
            log.error("%s: cannot write %s: %s", what, acl.path, e)
            return RemotingCommand.response_to(
                request, failed, remark=f"{what} failed: cannot write {acl.path}: {e}"
            )
        log.info("%s by %s written to %s", what, conn.peer_address, acl.path)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def update_account(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        def change(request: RemotingCommand) -> Edit:
            h = CreateAccessConfigRequestHeader.from_ext(request.ext_fields)
            account = AccountChange(
                access_key=h.access_key.strip(),
                secret_key=h.secret_key.strip() if h.secret_key is not None else None,
                white_remote_address=h.white_remote_address,
                admin=h.admin,
                default_topic_perm=h.default_topic_perm,
                default_group_perm=h.default_group_perm,
                topic_perms=split_list(h.topic_perms),
                group_perms=split_list(h.group_perms),
            )
            return lambda doc: updated_account(doc, account)

        key = request.ext_fields.get("accessKey", "")
        return await self._change(
            conn,
            request,
            ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
            f"updating the account of accessKey {key!r}",
            change,
        )

    async def delete_account(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        def change(request: RemotingCommand) -> Edit:
            key = DeleteAccessConfigRequestHeader.from_ext(request.ext_fields).access_key
            return lambda doc: without_account(doc, key)

        key = request.ext_fields.get("accessKey", "")
        return await self._change(
            conn,
            request,
            ResponseCode.DELETE_ACL_CONFIG_FAILED,
            f"deleting the account of accessKey {key!r}",
            change,
        )

    async def update_global_white(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        def change(request: RemotingCommand) -> Edit:
            h = UpdateGlobalWhiteAddrsConfigRequestHeader.from_ext(request.ext_fields)
            acl = self.broker.acl
            assert acl is not None
            if h.acl_file_full_path is not None and not _same_file(
                h.acl_file_full_path, str(acl.path)
            ):
                raise AclError(
                    f"this broker reads one ACL file, {_absolute(acl.path)}, "
                    f"not {h.acl_file_full_path}"
                )
            patterns = split_list(h.global_white_addrs) or []
            return lambda doc: with_global_white(doc, patterns)

        addrs = request.ext_fields.get("globalWhiteAddrs", "")
        return await self._change(
            conn,
            request,
            ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
            f"updating the global white list to {addrs!r}",
            change,
        )

    async def acl_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The data version of the broker's ACL file, and which broker answers."""
        acl = self.broker.acl
        if acl is None:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=NOT_ENABLED
            )
        version = _version_json(acl.version())
        config = self.broker.config
        header = GetBrokerAclConfigResponseHeader(
            version=version,
            all_acl_file_version=json.dumps(
                {_absolute(acl.path): json.loads(version)}, separators=(",", ":")
            ),
            broker_name=config.broker_name,
            broker_addr=self.broker.address,
            cluster_name=config.broker_cluster_name,
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=header.to_ext()
        )

    async def acl_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The ACL file's global white list and accounts, secrets included (RocketMQ's
        AclConfig), as the file holds them now."""
        acl = self.broker.acl
        if acl is None:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=NOT_ENABLED
            )
        try:
            config = acl_config(await asyncio.to_thread(acl.document))
        except AclError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        body = json.dumps(config, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)


def _absolute(path: "os.PathLike[str]") -> str:
    return os.path.abspath(path)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
