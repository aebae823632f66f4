"""Stand-in for Hugging Face datasets: torchtune imports it at module level for its
training datasets; the reference's inference path never loads one."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("datasets is stubbed in the reference env")
