"""A user's module with functions but no fieldmem.case registration."""


def update(u):
    return u + 1
