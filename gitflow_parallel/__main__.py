import sys


def _main() -> None:
    # The hook scripts' slow path (``_hook``) runs on checkouts and merges:
    # it goes straight to the hook code, without the CLI (click and every
    # verb) when the arguments are the scripts' own.
    if sys.argv[1:2] == ["_hook"]:
        from gitflow_parallel.commands import hook_impl

        parsed = hook_impl.parse_argv(sys.argv[2:])
        if parsed is not None:
            name, common, branch, args = parsed
            sys.exit(hook_impl.run(name, args, common, branch=branch, stdin=sys.stdin))
    from gitflow_parallel.cli import entry

    entry()


if __name__ == "__main__":
    _main()
