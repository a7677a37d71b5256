"""Running a profile: workload to schedule, driver, results directory, summary text and progress line."""
