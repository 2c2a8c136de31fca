# fit(DataLoader(..., num_workers=1, persistent_workers=True, shuffle=True)) leaves the loader's persistent
# iterator (and its worker process) behind. The user's next `for b in loader` then reuses it instead of
# starting one, so it draws one number fewer from torch's RNG: the epoch's shuffle order differs from the
# same notebook without the fit call (and a worker process stays alive holding the loader's memory).
import torch, vramnb, sys
from torch.utils.data import DataLoader, TensorDataset
def first_epoch(call_fit):
    torch.manual_seed(0)
    ds = TensorDataset(torch.arange(32.).reshape(32, 1).repeat(1, 8))
    dl = DataLoader(ds, batch_size=8, shuffle=True, num_workers=1, persistent_workers=True)
    model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if call_fit:
        vramnb.fit(model, dl, lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False)
        print("loader._iterator left by fit:", type(dl._iterator).__name__)
    order = [int(b[0][i, 0]) for b in dl for i in range(len(b[0]))]
    return order
if __name__ == "__main__":
    a, b = first_epoch(False), first_epoch(True)
    print("epoch order without fit:", a[:12], "\nepoch order after fit:  ", b[:12])
    print("PASS" if a == b else "FAIL: calling fit changed the order of the user's next epoch")
