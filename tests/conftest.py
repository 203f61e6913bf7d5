from hypothesis import settings

# derandomize: CI runs the same examples every time (reproducible, never flaky); run
# with --hypothesis-profile=explore locally to search new random examples.
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.register_profile("explore", deadline=None, max_examples=200)
settings.load_profile("ci")
