"""The interface every driver link implements: what :class:`hil.drive.driver.Driver` needs of the connection to
a rig's device(s), whatever carries it.

Three links implement it: :class:`hil.drive.links.serial.SerialLink` (one microcontroller speaking
firmware_interface.protocol), :class:`hil.drive.links.dynamixel.DynamixelLink` (a Dynamixel bus, translated to
that protocol's messages) and :class:`hil.drive.links.composite.CompositeLink` (a bus for the servos plus a
microcontroller for the sensors). :func:`hil.drive.links.factory.connect_rig` picks one from the rig file.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from firmware_interface import protocol as p
from hil.drive.links.serial import LinkTotals

if TYPE_CHECKING:
    from hil.drive.emulator_child import EmulatorChild

#: a link's ``state``, in the order a connection goes through them (any error: back to "closed")
LINK_STATES = ("closed", "hello", "configuring", "up")


@runtime_checkable
class Link(Protocol):
    """A connection to the device(s), driven by the driver's single loop: nothing here blocks.

    The link speaks firmware_interface.protocol messages to the driver both ways: ``send`` takes one (SETPOINTS,
    HEARTBEAT, ESTOP, ...), ``receive`` then ``handshake_step`` return the packets the driver handles
    (TELEMETRY, HEARTBEAT, ESTOP, LINK_STATS, ACK, NACK). Errors of the port or the device raise
    :class:`hil.drive.links.serial.LinkError` with a one-line message, and leave the link ``closed``.
    """

    state: str                            # one of LINK_STATES
    port_name: str | None                 # the port it is open on (a composite link: the servo device's)
    totals: LinkTotals                    # counters over every connection of this driver
    device_stats: p.LinkStats | None      # the device's own link counters, latest (the driver stores them)
    servo_read_ns: int | None             # wall clock of the servo read in the last telemetry, or None
    last_rx_s: float | None               # monotonic time anything last came in (silence detection)

    @property
    def up(self) -> bool:
        """Handshake done: telemetry flows and setpoints may be sent."""

    def open(self, port_name: str, now_s: float) -> None:
        """Open the port and start the handshake; LinkError if it cannot be opened."""

    def close(self) -> None:
        """Close the port(s); idempotent."""

    def fileno(self) -> int | None:
        """A descriptor the driver's loop polls for input, or None when closed."""

    def receive(self, now_s: float) -> list[p.Packet]:
        """The packets that came in since the last call (never blocks)."""

    def handshake_step(self, packets: list[p.Packet], now_s: float) -> list[p.Packet]:
        """Advance the handshake with ``packets``; returns those the driver handles itself."""

    def send(self, message: p.Message, t_us: int = 0) -> int | None:
        """Send one message; its seq, or None when the last line refused it (nothing sent)."""

    def counters(self) -> dict:
        """The link counters of hw/status ``link`` (docs/messages.md)."""

    def emulators(self) -> tuple[EmulatorChild, ...]:
        """Emulator children the link runs itself (not the device's own, which the driver runs)."""
