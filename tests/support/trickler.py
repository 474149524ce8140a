"""S1's attacker, run as its own process (`python -m tests.support.trickler PORT PEER N TICK`) so its
event loop does not share the measuring test's: N sockets from PEER, each sending a request
head one byte per TICK seconds and reconnecting when the router cuts it off. Prints `going`
once every socket has sent two bytes on average; runs until killed."""

from __future__ import annotations

import asyncio
import sys

HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10_000


class Attack:
    def __init__(self, sockets: int) -> None:
        self.target, self.sent = 2 * sockets, 0

    def count(self) -> None:
        self.sent += 1
        if self.sent == self.target:
            print("going", flush=True)


async def trickle(port: int, peer: str, tick: float, attack: Attack) -> None:
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
        except OSError:
            await asyncio.sleep(tick)
            continue
        try:
            for byte in HEAD:
                writer.write(bytes([byte]))
                await writer.drain()
                attack.count()
                await asyncio.sleep(tick)
                if writer.is_closing():
                    break
        except OSError:
            pass
        finally:
            writer.close()
        await asyncio.sleep(tick)


async def main(port: int, peer: str, sockets: int, tick: float) -> None:
    attack = Attack(sockets)
    await asyncio.gather(*(trickle(port, peer, tick, attack) for _ in range(sockets)))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
