"""What tests share: jobs, fakes, servers, waits and second users - one package, imported as ``tests.helpers.X``."""
