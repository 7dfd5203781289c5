import asyncio
import random


async def fetch(key: str, delay: float = 0.01) -> dict:
    await asyncio.sleep(delay * random.random())
    return {"key": key, "value": len(key) ** 2}


async def fetch_all(keys):
    tasks = [asyncio.create_task(fetch(k)) for k in keys]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    ok = {r["key"]: r["value"] for r in results if not isinstance(r, Exception)}
    return ok


async def ticker(n):
    for i in range(n):
        yield i
        await asyncio.sleep(0)


async def main():
    data = await fetch_all(["alpha", "beta", "gamma"])
    async for tick in ticker(3):
        print("tick", tick)
    async with asyncio.timeout(1):
        await asyncio.sleep(0)
    print(sorted(data.items(), key=lambda kv: (-kv[1], kv[0])))


if __name__ == "__main__":
    asyncio.run(main())
