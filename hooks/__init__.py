"""Hook script templates installed by `git parallel hooks install`."""
