"""`python -m benchmarks`: run every benchmark and print the ratios (see README)."""

from benchmarks import definitions_load, night_overhead


def main() -> None:
    ratios = {**definitions_load.main(), **night_overhead.main()}
    print("\nratios:")
    for name, value in ratios.items():
        print(f"  {name:<28} {value:6.2f}")


if __name__ == "__main__":
    main()
