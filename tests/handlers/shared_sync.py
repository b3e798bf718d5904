def run(job):
    return "a plain def cannot share a child"
