from gitflow_parallel.cli import main

if __name__ == "__main__":
    main()
