# A schedule is imported by its id.
terraform import outpost_schedule.web_nightly web-nightly
