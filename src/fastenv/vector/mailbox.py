"""A worker's mailbox: messages counted by semaphores, the common steps carried in shared memory.

Every message between the vector env and a worker posts one token on the receiver's semaphore,
whichever way it travels. The receiver takes a token, then reads the message from its slot in
shared memory when the slot's tag is that message's number, else from the pipe. A slot is written
before its token; a pipe message after it, so that one larger than the pipe's buffer is read while
it is written (the receiver's read waits for the whole message). A step command with nothing to pickle (no restarts, actions in the
space's dtype) and a step's reply without infos (empty infos, an ended episode's empty final
info) travel in the slots: no pickling, no system call. Everything else is pickled through the
pipe, in the same order.

A wait takes tokens without blocking for ``spin_wait`` seconds, yielding the core between tries
(a process that sleeps takes tens of microseconds to wake, which dominates the step of a fast
env), then sleeps on the semaphore. Yielding keeps a spinning process from holding a core that
another process needs when there are more processes than cores.

Semaphore operations are atomic and order memory (release on post, acquire on take), so what a
sender wrote before its post is what the receiver reads after its take.
"""

from __future__ import annotations

import os
import select
import time
from typing import Any

import numpy as np

# Slot layout (one int64 row): tag (the message's number, -1 for none), kind, command id, count, ids...
HEAD = 4
NO_TAG = -1
STEP_BY_STAGE, STEP_PER_ENV = 1, 2  # command kinds
STEP_REPLY, ENV_REPLY = 1, 2  # reply kinds

# A sleeping process wakes at least this often (seconds) to see whether its peer has gone.
CHECK_PEER_EVERY = 0.05


def slot_length(envs_per_worker: int) -> int:
    """Entries of one slot: the head and an env id per env of the worker."""
    return HEAD + envs_per_worker


def clear(slot: np.ndarray) -> None:
    """Mark a slot as holding no message (a fresh worker numbers its messages from 0 again)."""
    slot[0] = NO_TAG


def encode_step(slot: np.ndarray, tag: int, message: tuple) -> bool:
    """Write a step command into ``slot`` if it needs no pickling; False if it does."""
    _, cmd, gids, restarts, per_env, dtypes = message
    if restarts or dtypes is not None or len(gids) > len(slot) - HEAD:
        return False
    slot[: HEAD + len(gids)] = (tag, STEP_PER_ENV if per_env else STEP_BY_STAGE, cmd, len(gids), *gids)
    return True


def decode_step(slot: np.ndarray, step: str) -> tuple:
    """The step command in ``slot``, as the pipe would have carried it."""
    _, kind, cmd, n, *gids = slot.tolist()
    return (step, cmd, tuple(gids[:n]), {}, kind == STEP_PER_ENV, None)


def encode_reply(slot: np.ndarray, tag: int, message: tuple, step: str, env: str) -> bool:
    """Write a step's reply into ``slot`` if it carries no info; False if it does.

    A whole-step reply lists only the envs with an info or an ended episode: it fits when each
    is an ended episode whose final info and new info are empty. A per-env reply fits likewise.
    """
    kind = message[0]
    if kind == step:
        entries = message[2]
        if len(entries) > len(slot) - HEAD:
            return False
        ended = []
        for gid, info, final in entries:
            if info or final:  # final is never None here: such an env is not listed
                return False
            ended.append(gid)
        slot[: HEAD + len(ended)] = (tag, STEP_REPLY, message[1], len(ended), *ended)
    elif kind == env:
        gid, info, final = message[2]
        if info or final:
            return False
        slot[: HEAD + 1] = (tag, ENV_REPLY, message[1], int(final is not None), gid)
    else:
        return False
    return True


def decode_reply(slot: np.ndarray, step: str, env: str) -> tuple:
    """The reply in ``slot``, as the pipe would have carried it (fresh empty info dicts)."""
    _, kind, cmd, n, *gids = slot.tolist()
    if kind == STEP_REPLY:
        return (step, cmd, [(gid, {}, {}) for gid in gids[:n]])
    return (env, cmd, (gids[0], {}, {} if n else None))


def take(semaphore: Any, spin_wait: float) -> bool:
    """Take a token: at once, or within ``spin_wait`` seconds of tries that yield the core."""
    if semaphore.acquire(False):
        return True
    end = time.perf_counter() + spin_wait
    while time.perf_counter() < end:
        os.sched_yield()
        if semaphore.acquire(False):
            return True
    return False


def hung_up(poller: Any) -> bool:
    """True when the other end of the polled pipe has closed (its process has gone)."""
    return any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(0))


class WorkerMailbox:
    """The worker's side: takes the vector env's messages in order and sends replies.

    A reply goes in the reply slot only as the first reply to a command that came in the command
    slot: the vector env sends such a command only once it has read every earlier reply of this
    worker, so the reply slot is free.
    """

    def __init__(self, conn: Any, inbox: Any, outbox: Any, wake: Any, spin_wait: float, step: str, env: str) -> None:
        self.conn, self.inbox, self.outbox, self.wake = conn, inbox, outbox, wake
        self.spin_wait = spin_wait
        self.step, self.env = step, env
        self.commands: np.ndarray | None = None
        self.replies: np.ndarray | None = None
        self.received = self.sent = 0
        self._reply_in_slot = False
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)

    def attach(self, commands: np.ndarray | None, replies: np.ndarray | None) -> None:
        """Use these slots (rows of the shared block) from now on; None lets go of them."""
        self.commands, self.replies = commands, replies

    def receive(self) -> tuple | None:
        """The next message; None once the vector env has gone."""
        if not take(self.inbox, self.spin_wait):
            while not self.inbox.acquire(True, CHECK_PEER_EVERY):
                if hung_up(self._poller):
                    return None
        tag = self.received
        self.received += 1
        slot = self.commands
        if slot is not None and slot[0] == tag:
            self._reply_in_slot = True
            return decode_step(slot, self.step)
        self._reply_in_slot = False
        try:
            return self.conn.recv()
        except (EOFError, OSError):  # the vector env went between its token and its message
            return None

    def send(self, message: tuple) -> None:
        """Send a reply (in the reply slot when it fits and the slot is free, else pickled)."""
        slot = self.replies
        in_slot = self._reply_in_slot and slot is not None and encode_reply(slot, self.sent, message, self.step, self.env)
        self._reply_in_slot = False
        self.sent += 1
        self.outbox.release()
        self.wake.release()  # after the token: a vector env woken by it finds the message
        if not in_slot:
            # After the token: a message larger than the pipe's buffer is written while the vector
            # env reads it (it reads the pipe once it has the token).
            self.conn.send(message)
        os.sched_yield()  # a vector env waiting on this core reads it now, not after this process's next try


class Mailbox:
    """The vector env's side of one worker's mailbox.

    A step command goes in the command slot when it fits and the worker has replied to the
    command the slot held last (so it has read it); its first reply may then come in the reply
    slot, which the worker fills only then.
    """

    def __init__(self, conn: Any, inbox: Any, outbox: Any, step: str, env: str) -> None:
        self.conn, self.inbox, self.outbox = conn, inbox, outbox
        self.step, self.env = step, env
        self.commands: np.ndarray | None = None
        self.replies: np.ndarray | None = None
        self.sent = self.received = 0
        self._slot_command = -1  # the command the slot held last
        self._answered = -1  # the latest command the worker has replied to (ids grow in send order)

    def attach(self, commands: np.ndarray, replies: np.ndarray) -> None:
        """Use these slots (rows of the shared block, which may hold a former worker's messages)."""
        clear(commands)
        clear(replies)
        self.commands, self.replies = commands, replies

    def send(self, message: tuple) -> None:
        """Send a message (raises OSError when the pipe is broken)."""
        slot = self.commands
        in_slot = message[0] == self.step and slot is not None and self._answered >= self._slot_command and encode_step(slot, self.sent, message)
        if in_slot:
            self._slot_command = message[1]
        self.sent += 1
        self.inbox.release()
        if not in_slot:
            self.conn.send(message)  # after the token: the worker reads a large message while it is written

    def take(self) -> list[tuple | None]:
        """Every message that has arrived, in order, without waiting (for a message's token: its
        pipe message is read whole); None last when the worker died before writing one."""
        out: list[tuple | None] = []
        while self.outbox.acquire(False):
            tag = self.received
            self.received += 1
            slot = self.replies
            if slot is not None and slot[0] == tag:
                message = decode_reply(slot, self.step, self.env)
            else:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):  # the worker died between its token and its message
                    out.append(None)
                    return out
            if message[1] > self._answered:  # every reply names its command
                self._answered = message[1]
            out.append(message)
        return out
