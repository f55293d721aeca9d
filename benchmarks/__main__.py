from benchmarks.runner import main

if __name__ == "__main__":  # not when a spawned child process re-imports this module
    raise SystemExit(main())
