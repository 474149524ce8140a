"""One adapter per native backend family; never imports router.api."""
