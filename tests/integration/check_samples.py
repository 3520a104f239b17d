import sys,glob,collections
# check_samples.py PREFIX NTRAIN EPOCHS: every sample of every epoch trained exactly once
# after voiding entries undone by rollbacks ("v VIEW STEP": entries of older views at step >= STEP,
# and the entries of its own file before it at step >= STEP: that worker rolled back, which a
# re-form over the same view id does, e.g. a 2|2 partition healed with no view change)
pre,ntrain,epochs=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
ents=[];rb={}
for f in glob.glob(pre+'.*'):
    mine=[]
    for line in open(f):
        p=line.split()
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
print("entries",len(ents),"valid samples",len(cnt),"twice",len(bad),"missing",miss,"rollbacks",rb)
sys.exit(1 if bad or miss else 0)
