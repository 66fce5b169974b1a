"""`python -m benchmarks`: run every benchmark and print the ratios (see README)."""

from benchmarks import definitions_load, image_cache, night_overhead


def main() -> None:
    ratios = {**definitions_load.main(), **night_overhead.main(), **image_cache.main()}
    width = max(28, *(len(name) for name in ratios))
    print("\nratios:")
    for name, value in ratios.items():
        print(f"  {name:<{width}} {value:6.2f}")


if __name__ == "__main__":
    main()
