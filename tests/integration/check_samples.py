import sys,glob,collections,re
# check_samples.py PREFIX NTRAIN EPOCHS: every sample of every epoch trained exactly once
# after voiding entries undone by rollbacks ("v VIEW STEP": entries of older views at step >= STEP,
# and the entries of its own file before it at step >= STEP: that worker rolled back, which a
# re-form over the same view id does, e.g. a 2|2 partition healed with no view change)
pre,ntrain,epochs=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
ents=[];rb={}
# a worker killed with kill -9 in the middle of a write leaves its last line cut: a
# last line without its newline is not counted (it may parse: a number cut short);
# when the worker was started again on the same log, its first line follows the cut
# one on the same line ('t 2 2v 3 30'): the cut part is not counted either; a
# malformed line otherwise is an error
def uncut(line):
    m=re.search(r'[tv] ',line[1:])
    return (line[:m.start()+1],line[m.start()+1:]) if m else (line,None)
cut=0
for f in glob.glob(pre+'.*'):
    mine=[]
    lines=open(f).read().split('\n')
    if lines and lines[-1]=='': lines.pop()
    elif lines: lines.pop(); cut+=1
    joined=[]
    for line in lines:
        head,rest=uncut(line)
        if rest is not None: cut+=1; line=rest
        joined.append(line)
    lines=joined
    for i,line in enumerate(lines):
        p=line.split()
        ok=(len(p)==5 and p[0]=='t') or (len(p)==3 and p[0]=='v')
        if ok:
            try: [int(x) for x in p[1:]]
            except ValueError: ok=False
        if not ok:
            if i==len(lines)-1: cut+=1; continue
            sys.exit(f"{f}:{i+1}: malformed line {line!r}")
        if p[0]=='t': mine.append((int(p[1]),int(p[2]),int(p[3]),int(p[4])))
        elif p[0]=='v':
            v,s=int(p[1]),int(p[2]); rb[v]=min(rb.get(v,s),s)
            mine=[e for e in mine if not (e[1]>=s and e[2]<=v)]
    ents+=mine
cnt=collections.Counter()
for e,step,view,smp in ents:
    if any(view<v and step>=s for v,s in rb.items()): continue
    cnt[(e,smp)]+=1
bad=[(k,c) for k,c in cnt.items() if c!=1]
miss=ntrain*epochs-len(cnt)
print("entries",len(ents),"valid samples",len(cnt),"twice",len(bad),"missing",miss,"rollbacks",rb,
      "cut last lines",cut)
sys.exit(1 if bad or miss else 0)
