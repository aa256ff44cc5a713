"""Looking at a job or this machine: doctor (is it ready?) and stacks (where is it hung?)."""
